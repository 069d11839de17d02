#!/usr/bin/env bash
# On the GPU machine: Orpheus' real-time admission (on, the default) at a capacity edge, this
# checkout against an older build, in one call: bench/options_ab.sh with the capacity
# benchmark's arguments (fp8 pages, --max-num-seqs at the listener count), no warm-up run.
#
#     CAP=336 NEW=<the checkout's commit> OLD=<commit> [ORDER="NEW_COMMIT OLD_COMMIT"] \
#         bash bench/admission_ab.sh
#
# OLD needs its tree as .old/OLD.tgz (made here before the call: bench/options_ab.sh's header
# says how) carried beside .gpu. CAP: 336 is an H200's edge with admission off, 248 an H100's
# (BENCHMARKS.md, the Orpheus table). Each run leaves its JSON, and the requests' timelines
# with every refusal and what admission's outlook read (traces.tgz: replay them here with
# bench/replay_refusals.py). ORDER may also name `off`: this checkout with admission off, the
# bar at that count, and any of EXTRA_VARIANTS (bench/options_ab.sh's NAME:ARGS, this checkout
# with other server arguments, e.g. "enc4:--encode-processes=4"). A fresh machine's two runs
# take ~5 min, a warm run ~2.
set -u
: "${NEW:?set NEW to the commit of this checkout}" "${OLD:?set OLD to a commit with .old/OLD.tgz}"
CAP=${CAP:-336}
nvidia-smi --query-gpu=name --format=csv,noheader
. "$(dirname "$0")/gpu_setup.sh"
export OUT=${OUT:-out}
WARMUP=0 VARIANTS="$NEW: $OLD: off:--no-realtime-admission ${EXTRA_VARIANTS:-}" ORDER=${ORDER:-"$NEW $OLD"} RUN_S=${RUN_S:-270} \
BENCH_ARGS="--model orpheus-3b --random-weights --capacity $CAP --no-early-stop --client-procs 4
  --drain-timeout 30 --server-arg=--kv-cache-dtype=fp8 --server-arg=--max-num-seqs=$CAP
  --commit REV" \
  bash "$(dirname "$0")/options_ab.sh"
grep -E "^== run|listeners:|engine admission|late streams:|first late chunks|engine to socket|encodes queued|engine loop between" "$OUT/summary.txt" | cut -c1-600
save_kernels
