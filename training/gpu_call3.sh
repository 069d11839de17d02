#!/usr/bin/env bash
# GPU call 3 (carry: .teacher and .voxdata holding call 1's codec/ and tokens/): synthesize more
# teacher speech with fresh sentences, encode it with call 1's codec, then train the SpeechLM on
# old + new tokens with held-out checks, exporting the best point under $OUT/voxgate-tiny.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, LM_SECONDS of training.
HOURS=${HOURS:-20}
SEED=${SEED:-3}
WORD_SHARE=${WORD_SHARE:-0.25}
ALIGN=0 PREV=1
. training/gpu_data.sh
"$PY" -m training.speechlm --tokens "$WORK/tokens" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --seconds "${LM_SECONDS:-240}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
