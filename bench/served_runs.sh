# Sourced by the GPU-call scripts that run `voxgate bench --serve` several times in one call
# (bench/options_ab.sh, bench/family_points.sh): what each does after a run. Expects OUT (the
# call's output folder, which comes back) and WORK (this call's own scratch folder).

# The point lines a run's log is read for: the server's start, each point's verdict and where
# its time went (voxbench's capacity, engine loop and admission lines, and the output encodes'
# waits and runs), a goodput point's verdict, its first audio's parts and the throughput, and why
# a system was not measured.
SERVED_RUN_LINES="ready after\|rate [0-9.]* req/s\|engine p50 ms\|goodput [0-9.]* req/s\|RTF \|listeners:\|conversations:\|late frames by second\|audio a running stream got\|late streams:\|engine loop\|engine codec\|LLM + codec by second\|LLM steps by second\|turn by rows and KV pages\|engine admission\|admission room by second\|admission turn fit by second\|server encodes\|server chunks from engine\|first late chunks\|not measured\|^error:"

# A bench's server, by its command line (voxbench/servers.py). Anchored on the python
# executable that runs it: `pkill -f` matches whole command lines, and a shell's (this script's
# caller's `bash -c …`) may quote the same words; killing it once ended the whole call.
SERVER_CMD="^[^ ]*python[^ ]* .*gateway\.cli --log-level [A-Z]* serve"
# A process multiprocessing spawned (a server's engine or output encoders, a bench's clients).
SPAWNED_CMD="^[^ ]*python[^ ]* .*from multiprocessing\.spawn import spawn_main"
STOP_WAIT_S=20  # for a server and its children to exit once told, before SIGKILL
GPU_FREE_WAIT_S=60  # for the driver to drop the killed processes' GPU memory

# left_behind: the spawned processes of this call's runs still there: those whose working
# folder is the checkout or a tree under $WORK (a run's server and its children work there),
# so no other process on the machine is taken for one.
left_behind() {
    local pid cwd
    for pid in $(pgrep -f "$SPAWNED_CMD"); do
        cwd=$(readlink "/proc/$pid/cwd" 2> /dev/null) || continue
        case $cwd in "$PWD" | "$PWD"/* | "$WORK"/*) echo "$pid" ;; esac
    done
}

# outliving: the pids of the servers and spawned processes still there, on one line.
outliving() {
    # shellcheck disable=SC2046  # the pids, joined by spaces
    echo $(pgrep -f "$SERVER_CMD") $(left_behind)
}

# stop_servers LABEL: no server of a run, nor anything it spawned, outlives it. A bench stops
# its servers, SIGTERM included, but one killed harder, or SIGTERMed while still starting up
# (before it handles the signal), leaves its engine process behind, holding the GPU's memory
# for every later run of the call (a tree with engine/parent_watch.py ends it within seconds;
# an older commit's tree never does). So: SIGTERM to the servers and the processes left
# behind, a wait until they are gone, SIGKILL to what is left; then, where nvidia-smi is, a
# wait until the GPU runs no compute process (the driver frees a dead process's memory after
# it is gone).
stop_servers() {
    local label=$1 pids waited=0
    pids=$(outliving)
    if [ -n "$pids" ]; then
        echo "  a server or its processes outlived $label: stopped" | tee -a "$OUT/summary.txt"
        # shellcheck disable=SC2086  # a list of pids
        kill $pids 2> /dev/null
        while [ -n "$pids" ] && [ "$waited" -lt $((STOP_WAIT_S * 2)) ]; do
            sleep 0.5
            waited=$((waited + 1))
            pids=$(outliving)
        done
        if [ -n "$pids" ]; then
            echo "  still there after $STOP_WAIT_S s, killed (SIGKILL): $pids" \
                | tee -a "$OUT/summary.txt"
            # shellcheck disable=SC2086  # a list of pids
            kill -9 $pids 2> /dev/null
        fi
    fi
    command -v nvidia-smi > /dev/null || return 0
    waited=0
    while [ -n "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null)" ]; do
        if [ "$waited" -ge $((GPU_FREE_WAIT_S * 2)) ]; then
            echo "  the GPU still runs a compute process after $GPU_FREE_WAIT_S s" \
                | tee -a "$OUT/summary.txt"
            return 0
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
}

# after_run LABEL LOG RESULTS NAME: after one bench run, whose log is LOG and whose results
# folder is RESULTS: stop what of it outlived the run (stop_servers), append its point lines to
# $OUT/summary.txt, keep its JSON as $OUT/NAME.json.gz, and pack the logs and the requests'
# timelines so far (after every run, so a call cut short by its time limit still brings them
# back).
after_run() {
    local label=$1 log=$2 results=$3 name=$4 json
    stop_servers "$label"
    grep -h "$SERVED_RUN_LINES" "$log" | sed 's/^.*INFO voxgate.bench //' | tee -a "$OUT/summary.txt"
    for json in "$results"/*.json; do
        [ -e "$json" ] && gzip -c "$json" > "$OUT/$name.json.gz"
    done
    (cd "$WORK" && tar czf "$OUT/logs.tgz" --exclude='*.json' --exclude='*.trace.jsonl' .)
    # The requests' timelines (--trace-requests: where each one's first audio and second chunk
    # went), every run's so far, in one file.
    (cd "$WORK" && find . -name '*.trace.jsonl' | tar czf "$OUT/traces.tgz" -T -)
}
