#!/bin/bash
# Session 33: the 1e-4 level-tag arm (session 32, runs/s32/fast, at step 1,500) trained on, and at each stage cooled
# 100 steps, released fp16 with v13's decoding, averaged with v13 (grown with the arm's tag rows), and evaluated on
# the full dev sets untagged; the arm also at each level into Korean. Every stage skips what exists when rerun.
set -e
cd /work/main
PY=.venv/bin/python
export BT_DIR=runs/bt22 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
CONFIG=configs/ablation/v13-levels-fast.yaml
RUN=runs/s32/fast
OUT=runs/s33
SETS=manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev
mkdir -p $OUT/eval
for STEP in ${STAGES:-1500 2000 2500 3000 3500 4000}; do
  TAG=$(printf %08d $STEP)
  [ -d $RUN/checkpoints/step-$TAG ] || $PY -m training.train --config $CONFIG --run-dir $RUN --max-steps $STEP --no-progress-bar
  COOL=$((STEP + 100)); CTAG=$(printf %08d $COOL)
  [ -d $OUT/cool-$STEP/checkpoints/step-$CTAG ] || $PY -m training.train --config $CONFIG --run-dir $OUT/cool-$STEP --fork-from $RUN/checkpoints/step-$TAG --cooldown-steps 100 --no-progress-bar
  [ -f $OUT/rel-$COOL/model.safetensors ] || $PY -m training.release --model $OUT/cool-$STEP/checkpoints/step-$CTAG --out $OUT/rel-$COOL --run-dir $OUT/cool-$STEP --decoding-from runs/v13
  [ -f $OUT/eval/rel-$COOL-dev.json ] || $PY -m training.evaluate --config configs/release-v4.yaml --model $OUT/rel-$COOL --sets $SETS --out $OUT/eval/rel-$COOL-dev.json
  [ -f $OUT/v13-soup-$COOL/model.safetensors ] || { $PY -m training.grow --model runs/v13 --new-units-from $OUT/rel-$COOL --out $OUT/v13g-$COOL && $PY -m training.average --models $OUT/v13g-$COOL $OUT/rel-$COOL --out $OUT/v13-soup-$COOL; }
  [ -f $OUT/eval/v13-soup-$COOL-dev.json ] || $PY -m training.evaluate --config configs/release-v4.yaml --model $OUT/v13-soup-$COOL --sets $SETS --out $OUT/eval/v13-soup-$COOL-dev.json
  for level in formal plain polite; do
    [ -f $OUT/eval/rel-$COOL-$level-dev.json ] || $PY -m training.evaluate --config configs/release-v4.yaml --model $OUT/rel-$COOL --sets $SETS --directions en-ko --speech-level $level --out $OUT/eval/rel-$COOL-$level-dev.json
  done
  $PY -m training.compare bench/results/session27/soup-dev.json $OUT/eval/rel-$COOL-dev.json $OUT/eval/v13-soup-$COOL-dev.json > $OUT/eval/compare-$COOL.txt || true
  echo "stage $STEP done $(date +%H:%M)"
done
echo pipeline done
