# What the scripts that spend a lent GPU's time in one call share (bench/cuda_session.sh, training/cuda_train.sh):
# what they carry there, how they check it fits, and how each step there runs. Sourced, not run.
#
# The device tool sends the tracked files and the carried paths, 64 MiB together, and brings back at most 8 files of
# 16 MiB each from $OUT: so the data travels xz-compressed, and the step logs come back as one archive.

CARRY=.gpu-carry
TRAVEL_LIMIT_MIB=64
# What the GPU image lacks (datasets and its own dependencies), at the versions .venv runs here.
WHEELS=(datasets==5.2.0 huggingface_hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 dill==0.4.1
        multiprocess==0.70.19 prometheus_client==0.26.0)
PYTHONS=(3.11 3.12 3.13)  # the image's Python is not known here; multiprocess ships one wheel per version
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python  # here; the GPU machine has no .venv

download_wheels() {
    rm -rf "$CARRY/wheels" && mkdir -p "$CARRY/wheels"
    for version in "${PYTHONS[@]}"; do
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --dest "$CARRY/wheels" \
            "${WHEELS[@]}" || return 1
    done
}

pack_run_data() {  # pack_run_data RUN_DIR ARCHIVE: the run's training and dev data and tokenizer, remade only when older
    local run=$1 archive=$2
    [ -f "$run/data/dev.jsonl" ] || { echo "error: $run/data is missing; run make data first" >&2; return 1; }
    if [ ! -s "$archive" ] || [ -n "$(find "$run/data" "$run/spm.model" -newer "$archive" -print -quit)" ]; then
        # xz -9e: release v14's 85 MB of training data in 12.4 MiB (16.3 at -6); unpacking takes seconds
        tar -C "$run" -cf - data/train data/dev.jsonl spm.model | xz -T0 -9e > "$archive.partial" \
            && mv "$archive.partial" "$archive" || return 1
    fi
}

check_travel_budget() {  # the tracked files and the carry must fit in one call's working tree
    local tracked carried
    tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -cb "$CARRY" serving/generated | tail -1 | cut -f1)
    awk -v t="$tracked" -v c="$carried" -v limit="$TRAVEL_LIMIT_MIB" 'BEGIN { printf "tracked files %.1f MiB + carry " \
        "%.1f MiB = %.1f MiB (limit %d)\n", t / 2^20, c / 2^20, (t + c) / 2^20, limit }'
    if [ $(( tracked + carried )) -gt $(( TRAVEL_LIMIT_MIB * 1048576 )) ]; then
        echo "error: too much to travel: carry less (delete what $CARRY holds for the other session script)" >&2
        return 1
    fi
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $LOGS/NAME.log, record the exit status
    local name=$1 limit=$2 started=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status after $(( SECONDS - started )) s" | tee -a "$SUMMARY"
    tail -n 25 "$LOGS/$name.log"
    return $status
}

install_missing() {  # the carried wheels of packages this image lacks, offline; pip picks the one for its Python
    local missing=() requirements
    read -ra requirements <<< "$WHEELS_LIST"  # arrays do not pass to the child bash that step starts
    for requirement in "${requirements[@]}"; do
        "$PY" -c "import ${requirement%%==*}" 2>/dev/null || missing+=("$requirement")
    done
    echo "missing: ${missing[*]:-nothing}"
    [ ${#missing[@]} -eq 0 ] || "$PY" -m pip install --no-index --no-deps --find-links "$CARRY/wheels" "${missing[@]}"
}

start_session() {  # $OUT, $LOGS inside it and an empty summary there; offline; the exports that steps run in child shells need
    OUT=${OUT:-$1}
    LOGS=$OUT/logs SUMMARY=$OUT/logs/summary.txt
    mkdir -p "$LOGS" && : > "$SUMMARY"
    export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PY CARRY WHEELS_LIST="${WHEELS[*]}"
    export -f install_missing
}

pack_logs() {  # the summary and the step logs as one archive (a call brings back at most 8 files); the summary on stdout
    cat "$SUMMARY"
    tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOGS"
}
