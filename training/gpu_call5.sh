#!/usr/bin/env bash
# GPU call 5, data only (carry: .teacher and .voxdata holding call 1's codec/ and tokens/):
# fresh teacher speech encoded with call 1's codec, the CTC aligner trained over old + new
# tokens, and every shard aligned. Returns $OUT/tokens/ (the new tokens-NN.npz, align-NN.npz
# for them, and align-prev-00.npz for .voxdata's shard), so that later calls can train the
# SpeechLM for their whole slot on these tokens instead of re-making them.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, ALIGN_SECONDS + ~20 s.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
mkdir -p "$WORK/tokens" "$OUT/tokens"
"$PY" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS:-16}" \
    --workers "${WORKERS:-16}" --seed "${SEED:-5}" --word-share "${WORD_SHARE:-0.4}"
"$PY" -m training.codec encode --teacher "$WORK/teacher" --codec "$DATA/codec" --out "$WORK/tokens"
for f in "$DATA"/tokens/tokens-*.npz; do cp "$f" "$WORK/tokens/tokens-prev-$(basename "$f" .npz | cut -d- -f2).npz"; done
"$PY" -m training.aligner train --tokens "$WORK/tokens" --out "$WORK/aligner" --seconds "${ALIGN_SECONDS:-75}"
"$PY" -m training.aligner align --tokens "$WORK/tokens" --aligner "$WORK/aligner"
cp "$WORK"/tokens/tokens-0*.npz "$WORK"/tokens/align-*.npz "$OUT/tokens/"
ls -la "$OUT"/tokens
