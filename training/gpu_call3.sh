#!/usr/bin/env bash
# GPU call 3 (carry: .teacher and .voxdata holding call 1's codec/ and tokens/): synthesize more
# teacher speech with fresh sentences, encode it with call 1's codec, then train the SpeechLM on
# old + new tokens with held-out checks, exporting the best point under $OUT/voxgate-tiny.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, LM_SECONDS of training.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
"$PY" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS:-20}" \
    --workers "${WORKERS:-16}" --seed "${SEED:-3}" --word-share "${WORD_SHARE:-0.25}"
"$PY" -m training.codec encode --teacher "$WORK/teacher" --codec "$DATA/codec" --out "$WORK/tokens"
for f in "$DATA"/tokens/tokens-*.npz; do cp "$f" "$WORK/tokens/tokens-prev-$(basename "$f" .npz | cut -d- -f2).npz"; done
"$PY" -m training.speechlm --tokens "$WORK/tokens" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --seconds "${LM_SECONDS:-240}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
