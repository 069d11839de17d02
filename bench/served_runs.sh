# Sourced by the GPU-call scripts that run `voxgate bench --serve` several times in one call
# (bench/options_ab.sh, bench/family_points.sh): what each does after a run. Expects OUT (the
# call's output folder, which comes back) and WORK (this call's own scratch folder).

# The point lines a run's log is read for: the server's start, each point's verdict and where
# its time went (voxbench's capacity, engine loop and admission lines, and the output encodes'
# waits and runs), a goodput point's verdict, its first audio's parts and the throughput, and why
# a system was not measured.
SERVED_RUN_LINES="ready after\|rate [0-9.]* req/s\|engine p50 ms\|goodput [0-9.]* req/s\|RTF \|listeners:\|conversations:\|late frames by second\|audio a running stream got\|late streams:\|engine loop\|engine codec\|LLM + codec by second\|LLM steps by second\|turn by rows and KV pages\|engine admission\|admission room by second\|admission turn fit by second\|server encodes\|not measured\|^error:"

# after_run LABEL LOG RESULTS NAME: after one bench run, whose log is LOG and whose results
# folder is RESULTS: kill a server that outlived it (a bench stops its servers, SIGTERM
# included; one killed harder would hold the GPU for every later run of the call), append its
# point lines to $OUT/summary.txt, keep its JSON as $OUT/NAME.json.gz, and pack the logs and the
# requests' timelines so far (after every run, so a call cut short by its time limit still brings
# them back).
after_run() {
    local label=$1 log=$2 results=$3 name=$4 json
    if pkill -f "gateway.cli --log-level [A-Z]* serve"; then
        echo "  a server outlived $label: killed" | tee -a "$OUT/summary.txt"
    fi
    grep -h "$SERVED_RUN_LINES" "$log" | sed 's/^.*INFO voxgate.bench //' | tee -a "$OUT/summary.txt"
    for json in "$results"/*.json; do
        [ -e "$json" ] && gzip -c "$json" > "$OUT/$name.json.gz"
    done
    (cd "$WORK" && tar czf "$OUT/logs.tgz" --exclude='*.json' --exclude='*.trace.jsonl' .)
    # The requests' timelines (--trace-requests: where each one's first audio and second chunk
    # went), every run's so far, in one file.
    (cd "$WORK" && find . -name '*.trace.jsonl' | tar czf "$OUT/traces.tgz" -T -)
}
