#!/usr/bin/env bash
# Release v14 with the first guard version's number penalties (ko-en 3, en-ko 2; guarded-copy.sh; the guard of
# commit 5d8a89e) on every dev and test set, then paired against the same weights as session 34 left them.
set -eu
cd "$(dirname "$0")/../../.."
bash bench/results/session36/guarded-copy.sh
.venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model runs/s36/v14-numbers \
  --out bench/results/session36/v14-numbers-eval.json
[ -d bench/results/session34/v14-rerank-eval ] || git checkout e8c2951 -- bench/results/session34/v14-rerank-eval
.venv/bin/python -m training.compare bench/results/session34/v14-rerank-eval.json bench/results/session36/v14-numbers-eval.json \
  > bench/results/session36/compare-numbers-eval.txt
git rm -rq --cached bench/results/session34/v14-rerank-eval && rm -r bench/results/session34/v14-rerank-eval
