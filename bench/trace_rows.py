"""The engine's decode steps stretch by stretch, rebuilt from its requests' timelines (a
`voxgate serve --trace-requests` file, as `voxgate bench --serve` leaves beside its results):
how many rows a step carried, how long a turn took, how many streams were live, and how soon
each stream's second chunk followed its first.

    python bench/trace_rows.py TRACE.jsonl[.gz] [--stretch-s 5] [--from-s A] [--to-s B]

Each request records its first and last token's engine step and time, and its tokens; spread
over the steps between them, they give the rows of every step (a stream that sits some steps
out, under the slack policy's lead caps, counts as the share of steps it took), and the steps'
times give the turn. Two policies or builds at the same load compare here even where their
points' loop summaries cover different windows (a point stopped early, a drain). The second
chunk's gap (engine/request_trace.py's `second_after_first`, of the streams that arrived in the
stretch) is what a listener with no buffer waits through after the first chunk's audio.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from engine.request_trace import read_traces, summarize


def decoding(traces: list[dict]) -> list[dict]:
    """The timelines of requests that made tokens."""
    return [t for t in traces if t.get("first_token_step") is not None and t.get("last_token_step")]


def by_stretch(
    traces: list[dict], stretch_s: float = 5.0, from_s: float = 0.0, to_s: float = np.inf
) -> list[dict]:
    """Per stretch of `stretch_s` seconds from the trace's first arrival: steps a second, the
    turn (ms), rows a step, live streams, tokens a second, and the second chunk's gap of the
    streams that arrived in it (p50 / p90 / max ms)."""
    traces = decoding(traces)
    if not traces:
        return []
    t0 = min(t["arrival"] for t in traces)
    marks = sorted(
        [(t["first_token_step"], t["arrival"] - t0 + t["first_token_ms"] / 1e3) for t in traces]
        + [(t["last_token_step"], t["arrival"] - t0 + t["last_token_ms"] / 1e3) for t in traces]
    )
    steps = np.arange(marks[-1][0] + 1)
    # Each step's time, between the steps whose times a request recorded.
    times = np.interp(steps, [s for s, _ in marks], [t for _, t in marks])
    rows, live = np.zeros(len(steps)), np.zeros(len(steps))
    for t in traces:
        first, last = t["first_token_step"], t["last_token_step"]
        rows[first : last + 1] += t["tokens"] / (last - first + 1)
        live[first : last + 1] += 1
    out = []
    start = from_s
    while start < min(to_s, times[-1]):
        end = start + stretch_s
        inside = (times >= start) & (times < end)
        count = int(inside.sum())
        if count >= 2:
            span = float(times[inside].max() - times[inside].min())
            arrived = [t for t in traces if start <= t["arrival"] - t0 < end]
            out.append(
                {
                    "from_s": round(start, 2),
                    "steps_per_s": round(count / span, 1) if span else None,
                    "turn_ms": round(1e3 * span / (count - 1), 2),
                    "rows": round(float(rows[inside].mean()), 1),
                    "live": round(float(live[inside].mean()), 1),
                    "tokens_per_s": round(float(rows[inside].sum()) / span) if span else None,
                    "second_chunk_gap_ms": summarize(arrived)["second_after_first"],
                }
            )
        start = end
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a --trace-requests file (.jsonl or .jsonl.gz)")
    parser.add_argument("--stretch-s", type=float, default=5.0)
    parser.add_argument("--from-s", type=float, default=0.0, help="from this far into the trace")
    parser.add_argument("--to-s", type=float, default=np.inf)
    args = parser.parse_args()
    if args.stretch_s <= 0:
        parser.error("--stretch-s must be > 0")
    for line in by_stretch(read_traces(args.trace), args.stretch_s, args.from_s, args.to_s):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
