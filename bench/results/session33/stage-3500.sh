#!/bin/bash
# Stop the resumed run once its step-3,500 checkpoint is written (SIGTERM saves another), then run the pipeline's stage at 3,500.
cd /work/main
until [ -f runs/s32/fast/checkpoints/step-00003500/model.safetensors ]; do sleep 10; done
sleep 20
pkill -TERM -f "training.train --config configs/ablation/v13-levels-fast.yaml --run-dir runs/s32/fast "
while pgrep -f "run-dir runs/s32/fast " > /dev/null; do sleep 5; done
STAGES=3500 bash runs/s33/pipeline.sh
