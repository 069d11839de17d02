#!/usr/bin/env bash
# GPU call 3 (carry: .teacher and .voxdata holding call 1's codec/ and tokens/): synthesize more
# teacher speech with fresh sentences, encode it with call 1's codec, then train the SpeechLM on
# old + new tokens with held-out checks, exporting the best point under $OUT/voxgate-tiny.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, LM_SECONDS of training.
#
# LM_ARGS_B (optional): a second variant trained at the same time on the same GPU and data
# (the 17.5 M model leaves the H200 mostly idle), exported under $OUT/voxgate-tiny-b: one call
# then answers two questions, e.g. LM_ARGS_B="--guided-weight 3 --code-noise 0.25".
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
"$PY" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS:-20}" \
    --workers "${WORKERS:-16}" --seed "${SEED:-3}" --word-share "${WORD_SHARE:-0.25}"
"$PY" -m training.codec encode --teacher "$WORK/teacher" --codec "$DATA/codec" --out "$WORK/tokens"
for f in "$DATA"/tokens/tokens-*.npz; do cp "$f" "$WORK/tokens/tokens-prev-$(basename "$f" .npz | cut -d- -f2).npz"; done
train() {  # $1: output folder name, then extra speechlm arguments
    local name=$1
    shift
    "$PY" -m training.speechlm --tokens "$WORK/tokens" --codec "$DATA/codec" --out "$OUT/$name" \
        --seconds "${LM_SECONDS:-240}" --sanity "${SANITY:-6}" "$@"
}
# shellcheck disable=SC2086  # the variant arguments are meant to split into words
if [ -n "${LM_ARGS_B:-}" ]; then
    train voxgate-tiny-b $LM_ARGS_B > "$OUT/variant-b.log" 2>&1 &
    B=$!
fi
train voxgate-tiny ${LM_ARGS:-}
if [ -n "${LM_ARGS_B:-}" ]; then
    wait "$B" || echo "variant b failed: see variant-b.log"
    tail -n 12 "$OUT/variant-b.log"
fi
ls -la "$OUT"/*
