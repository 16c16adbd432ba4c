#!/usr/bin/env bash
# The ceiling of reranking release v14's beam: MAP, MBR and the oracle (each sentence's candidate closest to its
# reference) over the beam-4 n-best of the first 300 lines of every dev set, before session 36 changed the
# release's decoding (its length penalty and n-gram ban; no reranking, no number penalty).
set -eu
cd "$(dirname "$0")/../../.."
[ -s runs/v4data/data/dev.jsonl ] || make data CONFIG=configs/release-v4.yaml RUN_DIR=runs/v4data
.venv/bin/python -m bench.mbr --model models/default --dev runs/v4data/data/dev.jsonl --beam-sizes 4 --sentences 300 \
  --threads 2 --out bench/results/session36/oracle.json
