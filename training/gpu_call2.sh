#!/usr/bin/env bash
# GPU call 2 (carry: .voxdata, holding call 1's codec/ and tokens/): train the SpeechLM and
# export the published checkpoint (codec included) under $OUT/voxgate-tiny.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
"${PY:-python3}" -m training.speechlm --tokens "$DATA/tokens" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --seconds "${LM_SECONDS:-400}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
