#!/usr/bin/env bash
# GPU call 1 (carry: .teacher): teacher speech → codec training → codec tokens of the corpus.
# Returns under $OUT: codec/{config.json,model.safetensors,train_log.txt}, tokens/tokens-NN.npz.
# Budget: ~75 s synthesis (16 cores), CODEC_SECONDS of training, ~30 s encoding.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
WORK=${WORK:-/tmp/voxwork}
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader 2>/dev/null || echo "no nvidia-smi: CPU run"
"${PY:-python3}" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS:-12}" --workers "${WORKERS:-16}"
"${PY:-python3}" -m training.codec train --teacher "$WORK/teacher" --out "$OUT/codec" --seconds "${CODEC_SECONDS:-240}" ${CODEC_ARGS:-}
"${PY:-python3}" -m training.codec encode --teacher "$WORK/teacher" --codec "$OUT/codec" --out "$OUT/tokens"
ls -la "$OUT"/*
