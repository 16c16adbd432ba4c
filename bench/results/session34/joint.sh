#!/bin/bash
# Session 34: does reranking move the best length penalty? Neighbouring α at the chosen λ, first 300 lines per dev set.
cd /work/main
S=manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev
for a in 0.8 1.2; do
  .venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model models/default --sets $S --limit 300 \
    --directions ko-en --length-penalty $a --out runs/s34/joint/koen-a$a.json
done
for a in 1.5 2.5; do
  .venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model models/default --sets $S --limit 300 \
    --directions en-ko --length-penalty $a --out runs/s34/joint/enko-a$a.json
done
