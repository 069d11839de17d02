#!/usr/bin/env bash
# Fresh teacher speech while the SpeechLM trains (run in the background by gpu_call7.sh; the
# trainer's `--grow GROW` reads each finished folder at an epoch's start). Chunk i: CHUNK_HOURS of
# teacher speech (sentence seed SEED0+i) encoded with $DATA/codec into $GROW/NN.tmp, renamed to
# $GROW/NN when whole (tokens-*.npz and phones-*.npz). Stops after MAX_CHUNKS, or when $GROW/STOP
# exists (the trainer is done). Budget per chunk on the H200 machine with 12 workers: about
# CHUNK_HOURS x 8 s of synthesis and x 2.5 s of encoding.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
DATA=${DATA:-.voxdata}
GROW=${GROW:?folder for the finished chunks}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
mkdir -p "$GROW" "$WORK"
for ((i = 0; i < ${MAX_CHUNKS:-24}; i++)); do
    [ -e "$GROW/STOP" ] && break
    name=$(printf %02d "$i")
    "$PY" -m training.teacher --debs .teacher --out "$WORK/grow-$name" --hours "${CHUNK_HOURS:-5}" \
        --workers "${WORKERS:-12}" --seed "$((${SEED0:-100} + i))" --word-share "${WORD_SHARE:-0.4}"
    "$PY" -m training.codec encode --teacher "$WORK/grow-$name" --codec "$DATA/codec" \
        --out "$GROW/$name.tmp" > /dev/null
    mv "$GROW/$name.tmp" "$GROW/$name"
    rm -rf "$WORK/grow-$name"
done
