#!/bin/bash
# Serving speed of release v13 against v14 (models/default), back to back and again in the other order, nothing else running.
cd /work/main
for m in v13:runs/v13 v14:models/default v14b:models/default v13b:runs/v13; do
  name=${m%%:*}; dir=${m#*:}
  .venv/bin/python -m bench.serve --model $dir --dev runs/s32/levels/data/dev.jsonl --threads 2 --precisions fp32 --batching on --clients 1 32 --out runs/s33/serve/$name.json
done
