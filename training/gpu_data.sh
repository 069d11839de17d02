# Sourced by GPU calls 4 and 5 (carry: .teacher and .voxdata holding call 1's codec/ and
# tokens/): fresh teacher speech (HOURS, SEED) encoded with call 1's codec into $WORK/tokens next
# to .voxdata's shards (as tokens-prev-NN.npz), then the CTC aligner trained over all of them
# for ALIGN_SECONDS and every shard aligned (align-*.npz). HOURS=0 skips the new speech; ALIGN=0
# skips the aligner (the phone route needs none: the teacher's phones-NN.npz say where each
# phone is), and then only .voxdata/codec need be carried; PREV (default: as ALIGN) says whether
# .voxdata's shards join $WORK/tokens.
# Budget: ~HOURS×6 s synthesis (16 cores), ~HOURS×2.5 s encoding, ALIGN_SECONDS + ~20 s.
set -euo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out}
DATA=${DATA:-.voxdata}
WORK=${WORK:-/tmp/voxwork}
PY=${PY:-python3}
mkdir -p "$WORK/tokens"
if [ "${HOURS}" != 0 ]; then
    "$PY" -m training.teacher --debs .teacher --out "$WORK/teacher" --hours "${HOURS}" \
        --workers "${WORKERS:-16}" --seed "${SEED}" --word-share "${WORD_SHARE:-0.4}"
    "$PY" -m training.codec encode --teacher "$WORK/teacher" --codec "$DATA/codec" --out "$WORK/tokens"
fi
if [ "${PREV:-${ALIGN:-1}}" != 0 ]; then
    for f in "$DATA"/tokens/tokens-*.npz; do cp "$f" "$WORK/tokens/tokens-prev-$(basename "$f" .npz | cut -d- -f2).npz"; done
fi
if [ "${ALIGN:-1}" != 0 ]; then
    "$PY" -m training.aligner train --tokens "$WORK/tokens" --out "$WORK/aligner" --seconds "${ALIGN_SECONDS:-75}"
    "$PY" -m training.aligner align --tokens "$WORK/tokens" --aligner "$WORK/aligner"
fi
