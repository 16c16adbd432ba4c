#!/usr/bin/env bash
# Serving speed of release v14 with its session-34 decoding (models/default) and with the number penalty
# (runs/s36/v14-numbers, guarded-copy.sh), before / after / before, one and 32 clients, step-level batching, fp32, two
# threads; nothing else running. Run twice: with the guard of commit 351a3f4 (serve/first-*.json, renamed after) and
# of commit 5d8a89e (serve/*.json). (In the session, models/default held the penalties and a copy the old metadata.)
set -eu
cd "$(dirname "$0")/../../.."
bash bench/results/session36/guarded-copy.sh
out=bench/results/session36/serve
mkdir -p "$out"
run() { .venv/bin/python -m bench.serve --model "$1" --dev runs/v4data/data/dev.jsonl --threads 2 --precisions fp32 \
          --batching on --clients 1 32 --out "$out/$2.json"; }
run models/default before-1
run runs/s36/v14-numbers numbers
run models/default before-2
