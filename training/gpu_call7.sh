#!/usr/bin/env bash
# GPU call 7: the phone-reading SpeechLM (as gpu_call6.sh) on a training set that GROWS while it
# trains (carry: .teacher, and .voxdata holding codec/ and tokens-phones/). Run 7 overfit 30 h of
# teacher speech (its best held-out point came at 70 % of the run), and more speech cannot be
# carried (64 MiB a call), so the GPU machine's idle CPU cores make it during the run:
# training/grow_data.sh writes CHUNK_HOURS chunks in the background and `speechlm --grow` adds
# each finished one at the next epoch's start. The held-out set stays the carried corpus's 1 %.
# Budget: as gpu_call6.sh; the teacher loop adds ~40 h over a 450 s run (12 synthesis workers
# beside the trainer's one core).
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
GROW=$WORK/grow
PY=${PY:-python3}
mkdir -p "$GROW"
GROW=$GROW DATA=$DATA WORK=$WORK PY=$PY bash training/grow_data.sh > "$WORK/grow.log" 2>&1 &
"$PY" -m training.speechlm --tokens "$DATA/tokens-phones" --codec "$DATA/codec" \
    --out "$OUT/voxgate-tiny" --phones --lexicon models/voxgate_tiny/lexicon.tsv.gz \
    --grow "$GROW" --seconds "${LM_SECONDS:-450}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
touch "$GROW/STOP"
grep "^teacher:" "$WORK/grow.log" || tail -5 "$WORK/grow.log"
ls -la "$OUT"/*
