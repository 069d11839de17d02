#!/usr/bin/env bash
# On the GPU machine: one serving benchmark run from several commits, RUNS times each, in one
# call, so that a regression can be told from run-to-run variance (one run each cannot: a point
# under 100 requests fails on a single stream 20 ms late). Each commit runs from its own tree
# unpacked in /tmp, with the call's wheels.
#
# Here, first (the shipped voxgate-tiny weights leave no room to carry anything else):
#     mkdir -p .old && for c in ff5e8ec HEAD; do
#         git archive $c -- . ':(exclude)models/voxgate_tiny/weights' | gzip > .old/$c.tgz; done
#     mv models/voxgate_tiny/weights /tmp/aside/        # back after the call
# then carry .whl_serve .gpu .old and run, after the wheels' setup (BENCHMARKS.md):
#     RUNS=2 bash bench/commits_ab.sh
# Env: RUNS (default 2), RUN_S (each run's time limit, default 210), BENCH_ARGS (the bench's
# arguments after --serve; default: CosyVoice 2 at 2 and 4 req/s), LANE (off, the default: the
# server gets --no-first-chunk-lane where its commit has the flag; on; or "" for the commit's
# own default), PY (python3). Each run prints its rate lines and leaves its result JSON as
# $OUT/<commit>-<i>.json.gz (a call returns 8 files).
set -uo pipefail
OUT=${OUT:-out}
RUNS=${RUNS:-2}
RUN_S=${RUN_S:-210}
BENCH_ARGS=${BENCH_ARGS:---model cosyvoice2-0.5b --random-weights --policies slack --rates 2,4
--bisect-steps 0 --duration 10 --min-requests 30 --drain-timeout 25 --client-procs 2
--time-budget 200}
LANE=${LANE-off}
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
shopt -s nullglob
archives=(.old/*.tgz)
if [ ${#archives[@]} -eq 0 ]; then
    echo "no .old/*.tgz to run: make them here with git archive (see the top of $0)" >&2
    exit 2
fi
mkdir -p "$OUT"
for run in $(seq "$RUNS"); do  # interleaved, so a drift of the machine hits every commit alike
    for tgz in "${archives[@]}"; do
        commit=$(basename "$tgz" .tgz)
        tree=/tmp/commits_ab/$commit
        if [ ! -d "$tree" ]; then mkdir -p "$tree" && tar xzf "$tgz" -C "$tree"; fi
        results=/tmp/commits_ab/results-$commit-$run
        lane=()  # commits from before the lane have no flag (and no lane)
        # The flag has lived in gateway/serve_cli.py, engine/config.py and models/cosyvoice2/.
        if [ -n "$LANE" ] && grep -rqs -- "first-chunk-lane" "$tree/gateway" "$tree/engine" "$tree/models"; then
            [ "$LANE" = on ] && lane=(--server-arg=--first-chunk-lane)
            [ "$LANE" = off ] && lane=(--server-arg=--no-first-chunk-lane)
        fi
        echo "== $commit run $run ${lane[*]}"
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
        (cd "$tree" && PYTHONPATH="$SITE:$tree" timeout "$RUN_S" "$PY" -m gateway.cli bench \
            --serve $BENCH_ARGS "${lane[@]}" --out "$results") > "$results.txt" 2>&1
        echo "exit $?"
        grep -h "ready after\|rate \|goodput" "$results.txt"
        for json in "$results"/*.json; do gzip -c "$json" > "$OUT/$commit-$run.json.gz"; done
    done
done
