#!/bin/bash
# Session 34: bf16 decoding (this CPU has AVX-512-BF16) of the reranked default: dev300 quality against fp32, then serving.
cd /work/main
S=manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev
.venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model models/default --sets $S --limit 300 --out runs/s34/bf16/fp32-dev300.json
.venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model models/default --sets $S --limit 300 --bf16 --out runs/s34/bf16/bf16-dev300.json
for m in rerank-bf16:models/default plain-bf16:runs/s34/v14-plain; do
  name=${m%%:*}; dir=${m#*:}
  .venv/bin/python -m bench.serve --model $dir --dev runs/s32/levels/data/dev.jsonl --threads 2 --precisions bf16 --batching on --clients 1 32 --out runs/s34/serve/$name.json
done
