#!/usr/bin/env bash
# The GPU checks of issue 13 in one call on a CUDA machine, and the preparation that makes them possible there.
#
#   bash bench/cuda_session.sh prepare        (make gpu-carry) here: wheels the GPU image lacks and the prepared
#                                             release data, compressed, into .gpu-carry/ (ignored by git)
#   bash bench/cuda_session.sh                on the GPU machine, from the repository root: offline installs,
#                                             pytest -m cuda, bench.decode and bench.train (both model sizes);
#                                             everything lands in $OUT (default .gpu-out/)
#   bash bench/cuda_session.sh --device cpu --quick    the same steps on the tiny fixtures, in seconds (a dry run)
#
# Every step has its own time limit and the session goes on past a failed one; the summary (printed, and in
# $OUT/logs.tar.gz) lists each step's exit status, so one run says what worked. The limits add up to 545 s; the steps should
# take far less, and they run in order of importance, so a call cut short at 580 s still brings back the first ones.
set -u

source "$(dirname "$0")/cuda_common.sh"

prepare() {
    download_wheels || exit 1
    pack_run_data runs/release "$CARRY/release-data.tar.xz" || exit 1
    check_travel_budget || exit 1
    echo 'run it on the GPU machine in one call:'
    echo '  run(command="bash bench/cuda_session.sh", carry=[".gpu-carry", "serving/generated"], timeout_s=580)'
}

DEVICE=cuda QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        prepare) prepare; exit 0 ;;
        --device) DEVICE=$2; shift ;;
        --quick) QUICK=1 ;;
        *) echo "usage: $0 [prepare | --device cuda|cpu] [--quick]" >&2; exit 2 ;;
    esac
    shift
done

start_session .gpu-out
export CUBLAS_WORKSPACE_CONFIG=:4096:8

describe() {
    nvidia-smi || true
    "$PY" -c "import torch, sys; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available()); print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
    "$PY" -c "import datasets, transformers, sentencepiece, safetensors, sacrebleu, grpc, yaml, matplotlib, tqdm, prometheus_client; print('imports ok')"
    "$PY" -c "import ctranslate2; print('ctranslate2', ctranslate2.__version__, 'cuda devices', ctranslate2.get_cuda_device_count())" || true
}

export -f describe  # step runs it under timeout, in a child bash

if [ "$QUICK" = 1 ]; then  # the tiny fixtures instead of the release data: checks the wiring, measures nothing
    RUN=$OUT/tiny-run RECIPE=configs/tiny.yaml DEV_ARGS=(--corpus tiny-dev --sentences 8 --runs 1 --batch-sizes 4)
    TRAIN_ARGS=(--steps 2 --warmup-steps 1 --matmul-size 256 --threads 1) BIG=(model.d_model=128 model.ffn_dim=256 training.max_tokens=800)
    COMPILE=() OURS_HF=(--systems ours-fp32) CT2=()
    step prepare-data 120 env DATA_DIR=tests/fixtures "$PY" -m training.prepare --config "$RECIPE" --run-dir "$RUN"
    PYTEST_ARGS=(tests/test_cuda.py -q -rs)
else
    RUN=runs/release RECIPE=configs/release.yaml DEV_ARGS=(--sentences 500 --runs 3)
    TRAIN_ARGS=(--steps 30 --warmup-steps 5 --threads 4)
    BIG=(model.d_model=512 model.n_heads=8 model.ffn_dim=2048 model.encoder_layers=6 model.decoder_layers=6 training.max_tokens=16384)
    COMPILE=(--compile) OURS_HF=(--systems ours-fp32 ours-bf16 hf-fp32 hf-bf16) CT2=(--systems ct2-fp32 ct2-bf16)
    step install 45 bash -c install_missing
    [ -f "$RUN/data/dev.jsonl" ] || step unpack-data 30 bash -c "mkdir -p $RUN && xz -dc $CARRY/release-data.tar.xz | tar -C $RUN -xf -"
    PYTEST_ARGS=(-m cuda tests/test_cuda.py -q -rs)
fi

# In order of what matters most, should the call's time run out: tests, decoding, training, CTranslate2.
step describe 20 bash -c describe
step pytest-cuda 100 "$PY" -m pytest "${PYTEST_ARGS[@]}" -p no:cacheprovider
step bench-decode 150 "$PY" -m bench.decode --device "$DEVICE" --model models/default --dev "$RUN/data/dev.jsonl" \
    "${DEV_ARGS[@]}" "${OURS_HF[@]}" --export-dir "$OUT/exports" --out "$OUT/decode-$DEVICE.json"
step bench-train-release 75 "$PY" -m bench.train --device "$DEVICE" --config "$RECIPE" --run-dir "$RUN" "${TRAIN_ARGS[@]}" \
    "${COMPILE[@]}" --out "$OUT/train-$DEVICE-release.json"
step bench-train-d512 75 "$PY" -m bench.train --device "$DEVICE" --config "$RECIPE" --run-dir "$RUN" "${TRAIN_ARGS[@]}" \
    --set "${BIG[@]}" --out "$OUT/train-$DEVICE-d512.json"
[ ${#CT2[@]} -eq 0 ] || step bench-decode-ct2 50 "$PY" -m bench.decode --device "$DEVICE" --model models/default \
    --dev "$RUN/data/dev.jsonl" "${DEV_ARGS[@]}" "${CT2[@]}" --export-dir "$OUT/exports" --out "$OUT/decode-$DEVICE-ct2.json"
rm -rf "$OUT/exports" "$OUT/tiny-run"  # large or regenerable: only results and logs come back
pack_logs
