#!/bin/bash
# The 1 : 2 mean of v13 (grown with the tag rows) and the arm at 2,000 + 100: untagged, then <formal> and <plain> into Korean.
cd /work/main
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
SETS=manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev
M=runs/s33/v13-soup12-2100
.venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model $M --sets $SETS --out runs/s33/eval/v13-soup12-2100-dev.json
for level in formal plain polite; do
  .venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model $M --sets $SETS --directions en-ko --speech-level $level --out runs/s33/eval/v13-soup12-2100-$level-dev.json
done
