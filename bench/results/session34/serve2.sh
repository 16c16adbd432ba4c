#!/bin/bash
# Session 34: serving speed again after nmt.continuous reranks every request that finishes at a step in one pass:
# reranked, plain, reranked back to back, nothing else running.
cd /work/main
for m in rerank2:runs/s34/v14-rerank plain2:models/default rerank2-b:runs/s34/v14-rerank; do
  name=${m%%:*}; dir=${m#*:}
  .venv/bin/python -m bench.serve --model $dir --dev runs/s32/levels/data/dev.jsonl --threads 2 --precisions fp32 --batching on --clients 1 32 --out runs/s34/serve/$name.json
done
