#!/usr/bin/env bash
# GPU call 6, LM only, reading PHONES (carry: .voxdata holding codec/ and tokens-phones/ — the
# tokens of calls 5 and 1 with their phones-NN.npz: tokens-00/01.npz, tokens-prev-00.npz and
# phones-00/01.npz, phones-prev-00.npz, from training/phones_backfill.py — and the lexicon,
# models/voxgate_tiny/lexicon.tsv.gz, tracked once the g2p branch is merged): the SpeechLM from
# scratch with --phones for LM_SECONDS, exporting the best held-out point under
# $OUT/voxgate-tiny (bf16 shards < 15 MiB) and its log as $OUT/voxgate-tiny_train_log.txt.
# Budget: ~15 s start, ~10 s loading (tokens, phones, the said-to-input alignment: 9 s for all
# 39,730 utterances on a CPU here), LM_SECONDS of training, then ~5 s final check and export
# (written by ~550 s; $OUT comes back even if the sanity check runs past the 600 s limit) and the
# sanity check (~20 s).
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
TOKENS=${TOKENS:-$DATA/tokens-phones}
LEXICON=${LEXICON:-models/voxgate_tiny/lexicon.tsv.gz}
PY=${PY:-python3}
"$PY" -m training.speechlm --tokens "$TOKENS" --codec "$DATA/codec" --out "$OUT/voxgate-tiny" \
    --phones --lexicon "$LEXICON" --seconds "${LM_SECONDS:-520}" --sanity "${SANITY:-6}" ${LM_ARGS:-}
ls -la "$OUT"/*
