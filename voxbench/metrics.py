"""The benchmark method's client-side metrics (docs/benchmarking.md), as pure functions over recorded frame timelines.

A timeline is the arrival time of every audio frame of one response (ms, any common origin)
and each frame's duration (ms). Playback starts when the first frame arrives (t0); with an
initial buffer b, a frame whose audio starts at offset o is on time if it arrives by
t0 + b + o. A request is viable when it succeeded and every frame was on time; a failed
request is never viable.

Underrun time simulates the player instead: it starts at t0 + b, plays frames back to back,
stalls when the next frame is not there yet and resumes the moment it arrives; underrun time
is the sum of those stalls. (Viability is the stricter figure: after a stall the player is
behind schedule, so the frames after it are not late for the player, but they are for the
viability rule, which never moves its deadlines.)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from voxbench.records import RequestRecord

# Records keep arrival times to 0.01 ms; comparisons allow that rounding, so re-evaluating a
# saved record always gives the verdict of the live run.
EPS_MS = 0.05


@dataclass(frozen=True)
class Slo:
    p90_ttfa_ms: float = 500.0
    viability: float = 0.99


# --- percentiles ----------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default method); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """p50 / p90 / p99 / mean / max, rounded to 0.1 (None when there are no values)."""

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 1)

    mean = sum(values) / len(values) if values else None
    return {
        "p50": r(percentile(values, 50)),
        "p90": r(percentile(values, 90)),
        "p99": r(percentile(values, 99)),
        "mean": r(mean),
        "max": r(max(values) if values else None),
        "n": len(values),
    }


# --- one timeline ---------------------------------------------------------------------------
class OnTimeTracker:
    """The viability rule fed one frame at a time (the load generator uses it live to know as
    early as possible that a request is no longer viable)."""

    def __init__(self, buffer_ms: float) -> None:
        self.buffer_ms = buffer_ms
        self.t0: float | None = None
        self.offset_ms = 0.0
        self.late_frames = 0

    def add(self, arrival_ms: float, duration_ms: float) -> bool:
        """Account for the next frame; True when it was on time."""
        if self.t0 is None:
            self.t0 = arrival_ms
        on_time = arrival_ms <= self.t0 + self.buffer_ms + self.offset_ms + EPS_MS
        self.offset_ms += duration_ms
        if not on_time:
            self.late_frames += 1
        return on_time


def frame_lateness(
    arrivals_ms: Sequence[float], durations_ms: Sequence[float], buffer_ms: float
) -> list[float]:
    """Each frame's arrival minus its deadline t0 + b + o (ms; > 0: late)."""
    _check(arrivals_ms, durations_ms)
    if not arrivals_ms:
        return []
    deadline = arrivals_ms[0] + buffer_ms
    out = []
    for arrival, duration in zip(arrivals_ms, durations_ms, strict=True):
        out.append(arrival - deadline)
        deadline += duration
    return out


def late_frames(
    arrivals_ms: Sequence[float], durations_ms: Sequence[float], buffer_ms: float
) -> int:
    """How many frames arrived after their deadline t0 + b + o."""
    _check(arrivals_ms, durations_ms)
    tracker = OnTimeTracker(buffer_ms)
    for arrival, duration in zip(arrivals_ms, durations_ms, strict=True):
        tracker.add(arrival, duration)
    return tracker.late_frames


def timeline_viable(
    arrivals_ms: Sequence[float], durations_ms: Sequence[float], buffer_ms: float
) -> bool:
    """Every frame on time (an empty timeline is not viable: nothing was heard)."""
    return bool(arrivals_ms) and late_frames(arrivals_ms, durations_ms, buffer_ms) == 0


def underrun(
    arrivals_ms: Sequence[float], durations_ms: Sequence[float], buffer_ms: float
) -> tuple[float, int]:
    """(total stall time in ms, number of stalls) of a player that starts at t0 + b."""
    _check(arrivals_ms, durations_ms)
    if not arrivals_ms:
        return 0.0, 0
    clock = arrivals_ms[0] + buffer_ms  # when the next frame is due to start playing
    stalled, stalls = 0.0, 0
    for arrival, duration in zip(arrivals_ms, durations_ms, strict=True):
        if arrival > clock + EPS_MS:
            stalled += arrival - clock
            stalls += 1
            clock = arrival
        clock += duration
    return stalled, stalls


def _check(arrivals_ms: Sequence[float], durations_ms: Sequence[float]) -> None:
    if len(arrivals_ms) != len(durations_ms):
        raise ValueError(f"{len(arrivals_ms)} arrivals but {len(durations_ms)} durations")


# --- records --------------------------------------------------------------------------------
def request_viable(record: RequestRecord, buffer_ms: float) -> bool:
    return record.ok and timeline_viable(record.arrivals_ms, record.frame_durations_ms(), buffer_ms)


def summarize(
    records: Iterable[RequestRecord], buffer_ms: float, slo: Slo, rate: float | None = None
) -> dict[str, Any]:
    """The figures of one rate point. TTFA percentiles are over every request that received
    audio (one that failed later still measured its TTFA); failed requests count against
    viability and are listed under `failures`; underrun time is over the successful ones."""
    records = list(records)
    ok = [r for r in records if r.ok]
    viable = [r for r in ok if request_viable(r, buffer_ms)]
    ttfa = [r.ttfa_ms for r in records if r.ttfa_ms is not None]
    server_ttfa = [
        float(r.done["ttfa_ms"]) for r in ok if r.done and r.done.get("ttfa_ms") is not None
    ]
    stalls = [underrun(r.arrivals_ms, r.frame_durations_ms(), buffer_ms) for r in ok]
    sent = sorted(r.sent_s for r in records if r.sent_s is not None)
    n = len(records)
    summary: dict[str, Any] = {
        "rate": rate,
        "requests": n,
        "ok": len(ok),
        "failed": n - len(ok),
        "failures": dict(Counter(r.failure for r in records if not r.ok)),
        "viable": len(viable),
        "viability": round(len(viable) / n, 4) if n else 0.0,
        "ttfa_ms": distribution(ttfa),
        "server_ttfa_ms": distribution(server_ttfa),
        "underrun_ms_total": round(sum(s for s, _ in stalls), 1),
        "underrun_stalls": sum(k for _, k in stalls),
        "requests_with_underrun": sum(1 for s, _ in stalls if s > 0),
        "late_frames": sum(
            late_frames(r.arrivals_ms, r.frame_durations_ms(), buffer_ms) for r in ok
        ),
        "audio_s_received": round(sum(r.received_audio_ms for r in records) / 1000, 2),
        "audio_s_requested": round(sum(r.audio_seconds for r in records), 2),
        "achieved_rate": round((len(sent) - 1) / (sent[-1] - sent[0]), 3)
        if len(sent) > 1 and sent[-1] > sent[0]
        else None,
    }
    summary["passes"] = meets_slo(summary, slo)
    return summary


def describe_not_viable(summary: dict[str, Any]) -> str | None:
    """Why a point's requests were not viable, as a log line (None when all were): each
    failure by its reason, most first (`stopped`: cut by the benchmark's early stop; an
    `overloaded` one: refused by the server's real-time admission), then the successful ones
    whose audio ran late."""
    failures = sorted(summary["failures"].items(), key=lambda kv: (-kv[1], kv[0]))
    late = summary["ok"] - summary["viable"]
    if not failures and not late:
        return None
    parts = [f"{n} {reason}" for reason, n in failures]
    parts.append(
        f"{late} completed with audio late ({summary['late_frames']} late frames, "
        f"{summary['requests_with_underrun']} with an underrun)"
    )
    return "not viable: " + ", ".join(parts)


def meets_slo(summary: dict[str, Any], slo: Slo) -> bool:
    p90 = summary["ttfa_ms"]["p90"]
    return (
        summary["requests"] > 0
        and p90 is not None
        and p90 <= slo.p90_ttfa_ms
        and summary["viable"] / summary["requests"] >= slo.viability  # unrounded
    )
