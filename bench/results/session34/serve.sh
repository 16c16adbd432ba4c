#!/bin/bash
# Session 34: serving speed of release v14 with and without reranking by back-translation (the same weights; only
# metadata.json's decoding differs), back to back and again in the other order, nothing else running.
cd /work/main
mkdir -p runs/s34/serve
for m in plain:models/default rerank:runs/s34/v14-rerank rerank-b:runs/s34/v14-rerank plain-b:models/default; do
  name=${m%%:*}; dir=${m#*:}
  .venv/bin/python -m bench.serve --model $dir --dev runs/s32/levels/data/dev.jsonl --threads 2 --precisions fp32 --batching on --clients 1 32 --out runs/s34/serve/$name.json
done
