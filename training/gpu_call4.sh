#!/usr/bin/env bash
# GPU call 4 (carry: .teacher and .voxdata holding call 1's codec/ and tokens/): call 3's fresh
# teacher speech encoded with call 1's codec, then a CTC character aligner over all the tokens
# (training/aligner.py) and the SpeechLM with the reading column (--reading), exporting the best
# held-out point under $OUT/voxgate-tiny.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, ALIGN_SECONDS + ~20 s of
# alignment, LM_SECONDS of training. HOURS=0 trains on .voxdata's tokens alone.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
mkdir -p "$WORK/tokens"
if [ "${HOURS:-20}" != 0 ]; then
    "$PY" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS:-20}" \
        --workers "${WORKERS:-16}" --seed "${SEED:-4}" --word-share "${WORD_SHARE:-0.4}"
    "$PY" -m training.codec encode --teacher "$WORK/teacher" --codec "$DATA/codec" --out "$WORK/tokens"
fi
for f in "$DATA"/tokens/tokens-*.npz; do cp "$f" "$WORK/tokens/tokens-prev-$(basename "$f" .npz | cut -d- -f2).npz"; done
"$PY" -m training.aligner train --tokens "$WORK/tokens" --out "$WORK/aligner" --seconds "${ALIGN_SECONDS:-75}"
"$PY" -m training.aligner align --tokens "$WORK/tokens" --aligner "$WORK/aligner"
"$PY" -m training.speechlm --tokens "$WORK/tokens" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --reading --seconds "${LM_SECONDS:-300}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
