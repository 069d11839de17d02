#!/usr/bin/env bash
# GPU call 4 (carry: .teacher and .voxdata holding call 1's codec/ and tokens/): fresh teacher
# speech, the CTC aligner and alignments (training/gpu_data.sh), then the SpeechLM with the
# reading pointer (--reading), exporting the best held-out point under $OUT/voxgate-tiny.
# Budget: gpu_data.sh's, then LM_SECONDS of training.
HOURS=${HOURS:-20}
SEED=${SEED:-4}
. training/gpu_data.sh
"$PY" -m training.speechlm --tokens "$WORK/tokens" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --reading --seconds "${LM_SECONDS:-300}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
