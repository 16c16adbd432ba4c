#!/usr/bin/env bash
# Train a recipe on a lent CUDA GPU in one call (issue 12) and bring the model back in files the device tool returns.
#
#   make data CONFIG=configs/release-v14.yaml BT_DIR=runs/bt22       here: the recipe's data, in runs/release-v14
#   bash training/cuda_train.sh prepare runs/release-v14   here (make gpu-train-carry CONFIG=...): the wheels the GPU
#                                                    image lacks and the run's data and tokenizer, xz, into .gpu-carry/
#   on the GPU machine, in one call of the device tool (make gpu-train CONFIG=... there does the same):
#     run(command="CONFIG=configs/release-v14.yaml MINUTES=5 bash training/cuda_train.sh",
#         carry=[".gpu-carry"], timeout_s=590)
#   back here, with the call's files under FILES_AT:
#     cp -r FILES_AT/model runs/gpu-model && python -m nmt.checkpoint join runs/gpu-model
#   bash training/cuda_train.sh --quick              the same steps on the tiny fixtures, on whatever device there is
#
# There: the wheels; the data unpacked into $RUN (default runs/<recipe name>, as make's RUN_DIR); `training.train` from $INIT_FROM's weights
# (default models/default; "none": from scratch) for $MINUTES minutes, which stops on a checkpoint (a second call on
# the still-warm machine resumes it exactly); a fork of that checkpoint cooled to a learning rate of 0 over
# $COOLDOWN_STEPS steps (default 200); released with fp16 weights and $DECODING_FROM's tuned decoding (default
# models/default; "none": untuned) and split into shards of at most 15 MiB in $OUT/model. The step logs and both
# runs' metrics come back as $OUT/logs.tar.gz, the summary printed too: 8 files at most, 60 MB of model fits.
# Choosing between the result, its mean with the release (training.average) and the release is done here, on
# the dev sets with training.evaluate: the GPU's minutes go to training.
set -u

source "$(dirname "$0")/../bench/cuda_common.sh"

prepare() {  # prepare RUN_DIR
    [ $# -eq 1 ] || { echo "usage: $0 prepare RUN_DIR (a run directory that make data prepared)" >&2; exit 2; }
    download_wheels || exit 1
    pack_run_data "$1" "$CARRY/train-data.tar.xz" || exit 1
    check_travel_budget || exit 1
    echo 'train on the GPU machine in one call (MINUTES of training; the rest of the call is set-up and release):'
    echo '  run(command="CONFIG=<the recipe> MINUTES=5 bash training/cuda_train.sh", carry=[".gpu-carry"], timeout_s=590)'
}

QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        prepare) shift; prepare "$@"; exit 0 ;;
        --quick) QUICK=1 ;;
        *) echo "usage: $0 [prepare RUN_DIR | --quick]" >&2; exit 2 ;;
    esac
    shift
done

start_session .gpu-out
SCRATCH=$(mktemp -d)  # the quick run's run directories
finish() {  # finish STATUS: what the call brings back, whether the session got to the end or not
    rm -rf "$SCRATCH"
    pack_logs
    exit "$1"
}
if [ "$QUICK" = 1 ]; then  # the tiny fixtures: checks the wiring in about a minute, measures nothing
    CONFIG=configs/tiny.yaml RUN=$SCRATCH/tiny-run INIT_FROM=none DECODING_FROM=none MINUTES=${MINUTES:-0.05} COOLDOWN_STEPS=2
    step prepare-data 120 env DATA_DIR=tests/fixtures "$PY" -m training.prepare --config "$CONFIG" --run-dir "$RUN" || finish 1
else
    CONFIG=${CONFIG:?name the recipe that prepared the carried data: CONFIG=configs/...yaml}
    RUN=${RUN:-runs/$(basename "$CONFIG" .yaml)} INIT_FROM=${INIT_FROM:-models/default} DECODING_FROM=${DECODING_FROM:-models/default}
    MINUTES=${MINUTES:-5} COOLDOWN_STEPS=${COOLDOWN_STEPS:-200}
    step install 60 bash -c install_missing || finish 1
    [ -d "$RUN/data/train" ] || step unpack-data 60 bash -c "mkdir -p $RUN && xz -dc $CARRY/train-data.tar.xz | tar -C $RUN -xf -" || finish 1
fi

newest_checkpoint() { ls -d "$1"/checkpoints/step-* | sort | tail -n 1; }
INIT=() DECODING=()
[ "$INIT_FROM" = none ] || INIT=(--init-from "$INIT_FROM")
[ "$DECODING_FROM" = none ] || DECODING=(--decoding-from "$DECODING_FROM")
# The run's own step limit must not end it before the clock does; --max-minutes stops it with a checkpoint.
step train "$(awk -v m="$MINUTES" 'BEGIN { print int(m * 60 + 120) }')" "$PY" -m training.train --config "$CONFIG" \
    --run-dir "$RUN" "${INIT[@]}" --max-steps 10000000 --max-minutes "$MINUTES" --no-progress-bar || finish 1
TRAINED=$(newest_checkpoint "$RUN")
rm -rf "$RUN-cooldown"  # a cooldown of an earlier call's checkpoint
step cooldown 180 "$PY" -m training.train --config "$CONFIG" --run-dir "$RUN-cooldown" --fork-from "$TRAINED" \
    --cooldown-steps "$COOLDOWN_STEPS" --no-progress-bar || finish 1
rm -rf "$OUT/model"
step release 120 "$PY" -m training.release --model "$(newest_checkpoint "$RUN-cooldown")" --out "$OUT/model" \
    --run-dir "$RUN" --check-sentences 50 "${DECODING[@]}" || finish 1
step split 60 "$PY" -m nmt.checkpoint split "$OUT/model" --max-mib 15 || finish 1
for run in "$RUN" "$RUN-cooldown"; do  # the curves and the steps' losses and dev scores
    mkdir -p "$LOGS/$(basename "$run")" && cp "$run"/*.json* "$run"/*.png "$LOGS/$(basename "$run")/" 2>/dev/null
done
echo "trained from $TRAINED, cooled $COOLDOWN_STEPS steps: $OUT/model" | tee -a "$SUMMARY"
finish 0
