#!/bin/bash
# The 1e-4 level-tag arm trained on from step 2,500 (session 33, after the release); SIGTERM saves a checkpoint.
cd /work/main
export BT_DIR=runs/bt22 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
.venv/bin/python -m training.train --config configs/ablation/v13-levels-fast.yaml --run-dir runs/s32/fast --max-steps 4000 --no-progress-bar
