#!/usr/bin/env bash
# GPU call 7: the phone-reading SpeechLM (as gpu_call6.sh) on a training set that GROWS while it
# trains (carry: .teacher, and .voxdata holding codec/ and tokens-phones/). Run 7 overfit 30 h of
# teacher speech (its best held-out point came at 70 % of the run), and more speech cannot be
# carried (64 MiB a call), so the GPU machine's idle CPU cores make it during the run:
# training/grow_data.sh writes CHUNK_HOURS chunks in the background and `speechlm --grow` adds
# each finished one at the next epoch's start. The held-out set stays the carried corpus's 1 %.
#
# SIZES (speechlm --size names, default "default") train side by side from the same data, on
# the machine's GPUs in turn (several on one GPU: a model this small leaves most of it idle);
# the one with the lowest summed held-out loss comes back as $OUT/voxgate-tiny (a call returns
# at most 8 files), and every run's log as $OUT/voxgate-tiny_train_log.txt.
# An entry SIZE@TAG trains that size with the extra speechlm arguments in $ARGS_TAG, for A/B
# runs of a recipe change: SIZES="wide wide@run8" ARGS_run8="--pointer-positions 0
# --guided-target diagonal" trains the wide size with and without run 9's pointer changes.
# Budget: as gpu_call6.sh; the teacher loop adds ~40 h over a 450 s run.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
GROW=$WORK/grow
PY=${PY:-python3}
mkdir -p "$GROW" "$OUT"
GROW=$GROW DATA=$DATA WORK=$WORK PY=$PY bash training/grow_data.sh > "$WORK/grow.log" 2>&1 &
# Trainers take the machine's GPUs in turn (nvidia-h200-x2: one each, and twice the CPU cores
# for WORKERS): each is its own process, so nothing is shared but the teacher's chunks.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)  # 0 without nvidia-smi
trainers=() i=0
for size in ${SIZES:-default}; do
    extra=""
    if [[ $size == *@* ]]; then extra_var="ARGS_${size#*@}" extra=${!extra_var:-}; fi
    CUDA_VISIBLE_DEVICES=$((i % (gpus > 0 ? gpus : 1))) "$PY" -m training.speechlm \
        --tokens "$DATA/tokens-phones" --codec "$DATA/codec" --out "$WORK/lm-$size/voxgate-tiny" \
        --phones --lexicon models/voxgate_tiny/lexicon.tsv.gz \
        --grow "$GROW" --size "${size%@*}" --seconds "${LM_SECONDS:-450}" --sanity "${SANITY:-6}" \
        ${LM_ARGS:-} $extra > "$WORK/lm-$size.out" 2>&1 &
    trainers+=($!) i=$((i + 1))
done
for pid in "${trainers[@]}"; do wait "$pid" || echo "a trainer failed (exit $?): see its log"; done
touch "$GROW/STOP"
best="" best_loss=""
for size in ${SIZES:-default}; do
    log="$WORK/lm-$size/voxgate-tiny_train_log.txt"
    { echo "=== size $size"; cat "$log"; } >> "$OUT/voxgate-tiny_train_log.txt" || continue
    loss=$(sed -n 's/^done: .*held-out loss //p' "$log" | awk '{s = 0; for (i = 2; i <= NF; i += 2) s += $i; print s}')
    echo "size $size: summed held-out loss ${loss:-none}"
    if [ -n "$loss" ] && { [ -z "$best" ] || awk "BEGIN {exit !($loss < $best_loss)}"; }; then
        best=$size best_loss=$loss
    fi
done
[ -n "$best" ] && cp -r "$WORK/lm-$best/voxgate-tiny" "$OUT/voxgate-tiny" && echo "returned: size $best"
grep "^teacher:" "$WORK/grow.log" || tail -5 "$WORK/grow.log"
ls -la "$OUT"/*
