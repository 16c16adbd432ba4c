#!/bin/bash
# Session 34: release v14's decoding defaults re-chosen on its dev sets with the reranking stage (tune_decoding).
cd /work/main
.venv/bin/python -m training.tune_decoding --config configs/release-v4.yaml --model runs/s34/v14-rerank \
  --sets manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev --limit 300 \
  --length-penalties 2.0 --no-repeat-ngram-sizes 3,4 --reconstruction-weights 0.1,0.2,0.3,0.5,0.75,1 --write
