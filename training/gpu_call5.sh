#!/usr/bin/env bash
# GPU call 5, data only (carry: .teacher and .voxdata holding call 1's codec/ and tokens/):
# training/gpu_data.sh's fresh speech, aligner and alignments, returned as $OUT/tokens/ (the new
# tokens-NN.npz, their align-NN.npz and phones-NN.npz, and align-prev-00.npz for .voxdata's shard), so that later
# calls can train the SpeechLM for their whole slot on these tokens instead of re-making them.
HOURS=${HOURS:-16}
SEED=${SEED:-5}
. training/gpu_data.sh
mkdir -p "$OUT/tokens"
shopt -s nullglob  # phones-NN.npz exist for teacher corpora that recorded Flite's phones
cp "$WORK"/tokens/tokens-0*.npz "$WORK"/tokens/align-*.npz "$WORK"/tokens/phones-*.npz "$OUT/tokens/"
ls -la "$OUT"/tokens
