#!/bin/bash
# Session 35: session 34's tuning (bench/results/session34/tune.sh) again, with the reranking stage sharing one
# search and one channel pass per dev set (tune_decoding.ReusingTranslator): the same choice and objectives, in less time.
cd /work/main
rm -rf runs/s35/v14-tune && cp -r models/default runs/s35/v14-tune
/usr/bin/time -v .venv/bin/python -m training.tune_decoding --config configs/release-v4.yaml --model runs/s35/v14-tune \
  --sets manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev --limit 300 \
  --length-penalties 2.0 --no-repeat-ngram-sizes 3,4 --reconstruction-weights 0.1,0.2,0.3,0.5,0.75,1
