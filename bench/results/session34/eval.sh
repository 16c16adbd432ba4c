#!/bin/bash
# Session 34: the full make eval of release v14 with its re-tuned decoding (reranking by back-translation), alone.
cd /work/main
.venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model runs/s34/v14-rerank
