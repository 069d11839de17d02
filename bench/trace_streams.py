"""Where a profiled step's GPU time went, stream by stream, from a Chrome trace (`--trace` of
bench/step_time.py, or a served profile's trace.json.gz).

    python bench/trace_streams.py trace.json.gz --steps N [--top 12]

N is the LLM steps the trace holds: step_time.py's `--steps` (40 in BENCHMARKS.md), or a
served profile's window (`--profile-dir`: engine/profile_window.TURNS, 100 turns).

For each CUDA stream: its kernels' total time and the largest kernels by time. For the busiest
stream (the LLM's decode steps): its idle gaps between kernels, and how much of that idle time
another stream's kernels were running. With the codec on a stream of its own, a gap covered
by codec kernels is the LLM's next kernel waiting for SMs the codec holds (stream priority
only orders blocks waiting to start), so that time is the codec's cost to the step.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    stream: int
    start_us: float
    end_us: float
    name: str


def read_kernels(path: str) -> list[Kernel]:
    """The trace's GPU kernels, in start order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [
        Kernel(int(e["args"].get("stream", -1)), e["ts"], e["ts"] + e["dur"], e["name"])
        for e in events
        if e.get("cat") == "kernel"
    ]
    return sorted(kernels, key=lambda k: k.start_us)


def covered_us(start: float, end: float, others: list[Kernel]) -> float:
    """Time in [start, end) during which some kernel of `others` ran (overlaps merged)."""
    spans = sorted(
        (max(start, k.start_us), min(end, k.end_us))
        for k in others
        if k.end_us > start and k.start_us < end
    )
    total, reach = 0.0, start
    for lo, hi in spans:
        lo = max(lo, reach)
        if hi > lo:
            total += hi - lo
            reach = hi
    return total


def report(kernels: list[Kernel], steps: int, top: int, min_gap_us: float = 5.0) -> dict:
    by_stream: dict[int, list[Kernel]] = defaultdict(list)
    for k in kernels:
        by_stream[k.stream].append(k)
    span_us = max(k.end_us for k in kernels) - min(k.start_us for k in kernels)
    streams = {}
    for stream, ks in sorted(
        by_stream.items(), key=lambda item: -sum(k.end_us - k.start_us for k in item[1])
    ):
        names: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for k in ks:
            names[k.name[:80]][0] += k.end_us - k.start_us
            names[k.name[:80]][1] += 1
        largest = sorted(names.items(), key=lambda item: -item[1][0])[:top]
        streams[stream] = {
            "kernel_ms": round(sum(k.end_us - k.start_us for k in ks) / 1e3, 2),
            "kernel_ms_per_step": round(sum(k.end_us - k.start_us for k in ks) / 1e3 / steps, 3),
            "largest": [
                {"name": name, "ms": round(ms / 1e3, 2), "calls": int(calls)}
                for name, (ms, calls) in largest
            ],
        }
    busiest = next(iter(streams))
    main = by_stream[busiest]
    others = [k for k in kernels if k.stream != busiest]
    gaps = [
        (a.end_us, b.start_us)
        for a, b in itertools.pairwise(main)
        if b.start_us - a.end_us > min_gap_us
    ]
    idle = sum(end - start for start, end in gaps)
    covered = sum(covered_us(start, end, others) for start, end in gaps)
    return {
        "span_ms": round(span_us / 1e3, 2),
        "span_ms_per_step": round(span_us / 1e3 / steps, 3),
        "busiest_stream": busiest,
        "busiest_idle_ms_per_step": round(idle / 1e3 / steps, 3),
        "busiest_idle_under_other_streams_ms_per_step": round(covered / 1e3 / steps, 3),
        "streams": streams,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument(
        "--steps",
        type=int,
        required=True,
        help="LLM steps the trace holds: step_time.py's --steps, or 100 for a served profile",
    )
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    print(json.dumps(report(read_kernels(args.trace), args.steps, args.top), indent=1))


if __name__ == "__main__":
    main()
