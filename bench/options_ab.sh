#!/usr/bin/env bash
# On the GPU machine: one build, several server options compared in one call, in an order that
# spreads the machine's drift over them (ABBA by default), after a discarded warm-up run. A
# fresh machine is slow for its first minutes (docs/benchmark-history.md, 2026-12-02), and at
# the capacity edge one run can hold most frames while the next collapses, so two builds or
# options are only compared in one call, each run at least twice.
#
#     . bench/gpu_setup.sh
#     VARIANTS="graphs: eager:--no-prompt-graphs" \
#     BENCH_ARGS="--model orpheus-3b --random-weights --capacity 144,160,176 --no-early-stop
#       --client-procs 4 --drain-timeout 30 --server-arg=--kv-cache-dtype=fp8
#       --server-arg=--max-num-seqs=256 --server-arg=--no-realtime-admission" \
#     bash bench/options_ab.sh
#
# Two commits compare the same way: a variant whose NAME has an archive .old/NAME.tgz runs from
# that commit's tree (made here, before the call, leaving out what does not need to travel:
#     mkdir -p .old && for c in c73c01a HEAD; do git archive --format=tar.gz $c -- . \
#         ':(exclude)models/voxgate_tiny/weights' ':(exclude)bench/results' > .old/$c.tgz; done
# then VARIANTS="c73c01a: HEAD:"; other variants run from the checkout). `.old` is git-ignored:
# the call carries it beside .gpu (carry [".gpu", ".old"]).
#
# Env: VARIANTS: space-separated NAME:ARGS, ARGS the variant's server arguments separated by
# commas (empty for the defaults; a variant that runs the checkout is best named after its
# commit, since REV in BENCH_ARGS, as in "--commit REV", becomes each run's variant name). ORDER: the variant names in run order (default: ABBA over
# the first two; one run when VARIANTS names one). BENCH_ARGS: the bench's arguments after --serve. WARMUP (default 1): first a
# run of the first variant whose result is dropped. PREFAULT_GIB (default 48): host memory
# touched once first (the VM's memory grows as it is used). RUN_S: each run's time limit
# (default 300). WARMUP_RUN_S: the warm-up's (default RUN_S; a fresh machine's first server
# start compiles FlashInfer's kernels unless .gpu/aot.txz carries them, and SNAC's blocks). Leaves $OUT/<i>-<name>.json.gz per run, $OUT/summary.txt (each run's point
# lines), $OUT/logs.tgz (the bench's and servers' logs) and $OUT/traces.tgz (the requests'
# timelines): under a call's 8 files.
set -uo pipefail
OUT=$(realpath -m "${OUT:-out}")
RUN_S=${RUN_S:-300}
WARMUP_RUN_S=${WARMUP_RUN_S:-$RUN_S}
WARMUP=${WARMUP:-1}
PREFAULT_GIB=${PREFAULT_GIB:-48}
: "${VARIANTS:?set VARIANTS, e.g. \"on: off:--no-prompt-graphs\"}"
: "${BENCH_ARGS:?set BENCH_ARGS, the bench arguments after --serve}"
declare -A ARGS
names=()
for variant in $VARIANTS; do
    name=${variant%%:*}
    ARGS[$name]=${variant#*:}
    names+=("$name")
done
if [ ${#names[@]} -eq 1 ]; then
    ORDER=${ORDER:-${names[0]}}
else
    ORDER=${ORDER:-"${names[0]} ${names[1]} ${names[1]} ${names[0]}"}
fi
for name in $ORDER; do
    [ -n "${ARGS[$name]+set}" ] || { echo "ORDER names $name, which VARIANTS does not" >&2; exit 2; }
done
mkdir -p "$OUT"
# The machine stays warm between calls and keeps /tmp: each call writes into a folder of its
# own, so no run picks up an earlier call's result of the same tag.
WORK=$(mktemp -d /tmp/options_ab.XXXXXX)
. "$(dirname "$0")/served_runs.sh"
if [ "$PREFAULT_GIB" -gt 0 ]; then
    python3 -c "
import numpy as np
for _ in range($PREFAULT_GIB // 8):
    np.ones(8 << 30, dtype=np.uint8)
"
fi

run() {  # run TAG NAME [LIMIT_S]: one bench run of variant NAME, its files tagged TAG
    local tag=$1 name=$2 limit=${3:-$RUN_S} server=() results=$WORK/$1-$2 tree=$PWD
    IFS=, read -ra flags <<< "${ARGS[$name]}"
    for flag in "${flags[@]}"; do [ -n "$flag" ] && server+=("--server-arg=$flag"); done
    if [ -f ".old/$name.tgz" ]; then  # a variant named after a commit's archive: its tree
        tree=$WORK/trees/$name
        [ -d "$tree" ] || { mkdir -p "$tree" && tar xzf ".old/$name.tgz" -C "$tree"; }
    fi
    echo "== $tag $name ${server[*]} (from $tree)"
    local args=${BENCH_ARGS//REV/$name}  # "--commit REV": the variant's name (its commit)
    # shellcheck disable=SC2086  # the bench's arguments are a list of words
    (cd "$tree" && PYTHONPATH="$tree:${SITE:-/tmp/site}" timeout -k 20 "$limit" \
        python3 -m gateway.cli bench --serve $args "${server[@]}" --out "$results") \
        > "$results.txt" 2>&1
    echo "exit $?"
    after_run "run $tag" "$results.txt" "$results" "$tag-$name"
}

[ "$WARMUP" = 1 ] && run warmup "${names[0]}" "$WARMUP_RUN_S" > /dev/null && rm -f "$OUT/warmup-${names[0]}.json.gz"
: > "$OUT/summary.txt"
i=0
for name in $ORDER; do
    i=$((i + 1))
    echo "== run $i: $name" >> "$OUT/summary.txt"
    run "$i" "$name"
done
