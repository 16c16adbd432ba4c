#!/bin/bash
# The level evals (en->ko at each tag) of a soup: runs/s33/soup-levels.sh NAME  (runs/s33/NAME)
cd /work/main
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
for level in formal plain polite; do
  [ -f runs/s33/eval/$1-$level-dev.json ] || .venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model runs/s33/$1 --sets manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev --directions en-ko --speech-level $level --out runs/s33/eval/$1-$level-dev.json
done
