#!/usr/bin/env bash
# One short served point per model family, each on a server of its own: the check that every
# family still serves end to end on this machine (a changed engine contract, a new GPU image),
# in one call, not a capacity figure.
#
#     . bench/gpu_setup.sh
#     MODELS="orpheus-3b cosyvoice2-0.5b chatterbox csm-1b moshi-7b qwen3-tts-1.7b zonos-v0.1
#       glm-4-voice-9b step-audio2-mini" bash bench/family_points.sh
#
# Text-to-speech models: 4 listeners started over 2 s, 6 s of audio each (`--capacity 4`);
# full-duplex ones (Moshi) the same with talking listeners and an 80-ms playout buffer (the bench
# tells them apart); turn-based ones (GLM-4-Voice, Step-Audio 2): 2 conversations of one spoken
# turn each (`--conversations 2`). Every published model runs with `--random-weights` (the
# tiny presets are random already; voxgate-tiny is trained). Zonos needs
# espeak-ng on the machine (`bench/gpu_carry.sh zonos` carries it) and is skipped, with a
# line saying so, where it is missing.
# Env: MODELS (required), RUN_S (each model's time limit, default 240), EXTRA (more bench
# arguments for every model, e.g. "--device cpu"). Leaves $OUT/summary.txt (each model's exit
# status, server start and point lines), $OUT/<model>.json.gz, $OUT/logs.tgz and $OUT/traces.tgz.
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
RUN_S=${RUN_S:-240}
: "${MODELS:?set MODELS, the presets to serve, e.g. \"orpheus-3b cosyvoice2-0.5b\"}"
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/family_points.XXXXXX)
. "$(dirname "$0")/served_runs.sh"
: > "$OUT/summary.txt"
for model in $MODELS; do
    case $model in
        *zonos*)
            if ! command -v espeak-ng > /dev/null; then
                echo "== $model: skipped (no espeak-ng on this machine)" | tee -a "$OUT/summary.txt"
                continue
            fi ;;
    esac
    case $model in
        *glm*voice* | *step-audio2*) point=(--conversations 2 --turns-each 1 --reply-seconds 3) ;;
        *moshi*) point=(--capacity 4 --stagger 2 --stream-seconds 6 --initial-buffer-ms 80) ;;
        *) point=(--capacity 4 --stagger 2 --stream-seconds 6) ;;
    esac
    weights=(--random-weights)
    case $model in tiny-* | voxgate-tiny) weights=() ;; esac  # random already, or trained
    # shellcheck disable=SC2086  # EXTRA is a list of words
    timeout "$RUN_S" python3 -m gateway.cli bench --serve --model "$model" "${weights[@]}" \
        "${point[@]}" --client-procs 1 --drain-timeout 20 ${EXTRA:-} --out "$WORK/$model" \
        > "$WORK/$model.txt" 2>&1
    echo "== $model: exit $?" | tee -a "$OUT/summary.txt"
    after_run "$model's run" "$WORK/$model.txt" "$WORK/$model" "$model"
done
