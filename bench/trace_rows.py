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
chunk's gap is what a listener with no buffer waits through after the first chunk's audio.
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    arrival_s: float
    first_step: int
    last_step: int
    first_token_s: float  # since the trace's first arrival
    last_token_s: float
    tokens: int
    second_chunk_gap_ms: float | None  # the second chunk out after the first's


def read_timelines(path: str) -> list[Timeline]:
    """Every request of the trace that made tokens, times from its first arrival."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("first_token_step") is not None and r.get("last_token_step")]
    if not rows:
        return []
    t0 = min(r["arrival"] for r in rows)
    out = []
    for r in rows:
        chunks = r.get("chunks") or []
        outs = [c.get("out_ms") for c in chunks[:2]]
        gap = outs[1] - outs[0] if len(outs) == 2 and None not in outs else None
        at = r["arrival"] - t0
        out.append(
            Timeline(
                at,
                r["first_token_step"],
                r["last_token_step"],
                at + r["first_token_ms"] / 1e3,
                at + r["last_token_ms"] / 1e3,
                r["tokens"],
                gap,
            )
        )
    return out


def by_stretch(
    timelines: list[Timeline], stretch_s: float = 5.0, from_s: float = 0.0, to_s: float = np.inf
) -> list[dict]:
    """Per stretch of `stretch_s` seconds: steps a second, the turn (ms), rows a step, live
    streams, tokens a second, and the second chunk's gap (p50, p99, ms) of the streams that
    arrived in it."""
    if not timelines:
        return []
    marks = sorted(
        [(t.first_step, t.first_token_s) for t in timelines]
        + [(t.last_step, t.last_token_s) for t in timelines]
    )
    steps = np.arange(max(s for s, _ in marks) + 1)
    # Each step's time, between the steps whose times a request recorded.
    times = np.interp(steps, [s for s, _ in marks], [t for _, t in marks])
    rows, live = np.zeros(len(steps)), np.zeros(len(steps))
    for t in timelines:
        span = t.last_step - t.first_step + 1
        rows[t.first_step : t.last_step + 1] += t.tokens / span
        live[t.first_step : t.last_step + 1] += 1
    out = []
    start = from_s
    while start < min(to_s, times[-1]):
        end = start + stretch_s
        inside = (times >= start) & (times < end)
        count = int(inside.sum())
        gaps = [
            t.second_chunk_gap_ms
            for t in timelines
            if start <= t.arrival_s < end and t.second_chunk_gap_ms is not None
        ]
        if count >= 2:
            span = float(times[inside].max() - times[inside].min())
            out.append(
                {
                    "from_s": round(start, 2),
                    "steps_per_s": round(count / span, 1) if span else None,
                    "turn_ms": round(1e3 * span / (count - 1), 2),
                    "rows": round(float(rows[inside].mean()), 1),
                    "live": round(float(live[inside].mean()), 1),
                    "tokens_per_s": round(float(rows[inside].sum()) / span) if span else None,
                    "second_chunk_gap_ms": _quantiles(gaps),
                }
            )
        start = end
    return out


def _quantiles(values: list[float]) -> dict | None:
    if not values:
        return None
    v = np.asarray(values)
    return {
        "p50": round(float(np.quantile(v, 0.5)), 1),
        "p99": round(float(np.quantile(v, 0.99)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a --trace-requests file (.jsonl or .jsonl.gz)")
    parser.add_argument("--stretch-s", type=float, default=5.0)
    parser.add_argument("--from-s", type=float, default=0.0, help="from this far into the trace")
    parser.add_argument("--to-s", type=float, default=np.inf)
    args = parser.parse_args()
    if args.stretch_s <= 0:
        parser.error("--stretch-s must be > 0")
    for line in by_stretch(read_timelines(args.trace), args.stretch_s, args.from_s, args.to_s):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
