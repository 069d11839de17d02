"""The benchmark method's client-side metrics (docs/benchmarking.md) on hand-made frame timelines (no server, no torch)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from voxbench.metrics import (
    OnTimeTracker,
    Slo,
    describe_not_viable,
    distribution,
    late_frames,
    meets_slo,
    percentile,
    request_viable,
    summarize,
    timeline_viable,
    underrun,
)
from voxbench.records import RequestRecord

F = 20.0  # ms per frame


def on_schedule(n: int, t0: float = 100.0) -> list[float]:
    return [t0 + i * F for i in range(n)]


# --- percentiles ------------------------------------------------------------------------------
def test_percentile_matches_numpy_linear():
    rng = random.Random(1)
    for n in (1, 2, 7, 100):
        values = [rng.uniform(0, 1000) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_percentile_edges():
    assert percentile([], 90) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_distribution_reports_the_three_percentiles():
    d = distribution([100.0] * 9 + [1000.0])
    assert d["p50"] == 100.0 and d["p90"] == pytest.approx(190.0) and d["max"] == 1000.0
    assert d["n"] == 10
    assert distribution([])["p90"] is None


# --- viability and underrun on one timeline ---------------------------------------------------
def test_frames_on_schedule_are_viable_without_underrun():
    arrivals = on_schedule(50)
    assert timeline_viable(arrivals, [F] * 50, 0)
    assert underrun(arrivals, [F] * 50, 0) == (0.0, 0)


def test_a_burst_ahead_of_playback_is_viable():
    arrivals = [100.0] * 30 + [100.0 + 500] + [700.0] * 5  # frame 30 is due at 100 + 600
    assert timeline_viable(arrivals, [F] * len(arrivals), 0)


def test_one_late_frame_breaks_viability_and_stalls_once():
    arrivals = on_schedule(10)
    for i in range(5, 10):
        arrivals[i] += 30.0  # frame 5 arrives 30 ms late; the rest keep that delay
    assert not timeline_viable(arrivals, [F] * 10, 0)
    assert late_frames(arrivals, [F] * 10, 0) == 5  # fixed deadlines: every later frame is late
    # The player stalls once for 30 ms, resumes, and then the delayed frames are in time for it.
    stalled, stalls = underrun(arrivals, [F] * 10, 0)
    assert stalled == pytest.approx(30.0) and stalls == 1


def test_initial_buffer_absorbs_lateness_up_to_its_size():
    arrivals = on_schedule(10)
    for i in range(5, 10):
        arrivals[i] += 30.0
    assert timeline_viable(arrivals, [F] * 10, 30.0)
    assert not timeline_viable(arrivals, [F] * 10, 29.0)
    assert underrun(arrivals, [F] * 10, 50.0) == (0.0, 0)


def test_underrun_sums_separate_stalls():
    arrivals = [0.0, 20.0, 60.0, 80.0, 150.0]  # due 0, 20, 40 (stall 20), 80, 100 (stall 50)
    stalled, stalls = underrun(arrivals, [F] * 5, 0)
    assert stalls == 2 and stalled == pytest.approx(20.0 + 50.0)


def test_uneven_frame_durations_set_the_offsets():
    durations = [40.0, 10.0, 10.0]  # offsets 0, 40, 50
    assert timeline_viable([0.0, 40.0, 50.0], durations, 0)
    assert not timeline_viable([0.0, 40.0, 51.0], durations, 0)


def test_empty_timeline_is_not_viable_and_lengths_must_match():
    assert not timeline_viable([], [], 0)
    assert underrun([], [], 0) == (0.0, 0)
    with pytest.raises(ValueError):
        late_frames([1.0, 2.0], [F], 0)


def test_live_tracker_agrees_with_the_batch_rule():
    rng = random.Random(7)
    for _ in range(50):
        arrivals = sorted(rng.uniform(0, 400) for _ in range(20))
        tracker = OnTimeTracker(25.0)
        late = sum(not tracker.add(a, F) for a in arrivals)
        assert late == late_frames(arrivals, [F] * 20, 25.0)


# --- records and a rate point ------------------------------------------------------------------
def record(index: int, arrivals: list[float], status: str | None = "length", **kw) -> RequestRecord:
    rec = RequestRecord(
        index,
        f"tts-{index}",
        1.0,
        82,
        index * 0.5,
        sent_s=index * 0.5,
        arrivals_ms=arrivals,
        frame_ms=F,
        **kw,
    )
    if status is not None:
        rec.done = {
            "status": status,
            "audio_ms": len(arrivals) * F,
            "ttfa_ms": arrivals[0] if arrivals else None,
        }
    return rec


def test_failed_requests_are_never_viable():
    refused = record(
        0,
        [],
        status=None,
        close_code=1013,
        errors=[{"code": "overloaded", "message": "busy", "fatal": True}],
    )
    assert not refused.ok and refused.failure == "error_overloaded"
    assert not request_viable(refused, 0)
    cancelled = record(1, on_schedule(5), status="cancelled")
    assert not request_viable(cancelled, 0) and cancelled.failure == "status_cancelled"
    timed_out = record(2, on_schedule(3), status=None, exception="drain_timeout")
    assert timed_out.failure == "drain_timeout"
    # A response the server's real-time admission refused in an open session reads apart
    # from one that failed without an error.
    admission = record(
        3, [], status="failed", errors=[{"code": "overloaded", "message": "no real-time capacity"}]
    )
    assert admission.failure == "status_failed_overloaded"
    assert record(4, [], status="failed").failure == "status_failed"


def test_summary_of_a_point():
    late = on_schedule(10, t0=200.0)
    late[6:] = [400.0] * 4  # frame 6 (due 320) comes 80 ms late, 7-9 queued behind it
    records = [
        record(0, on_schedule(10, t0=100.0)),  # viable, TTFA 100
        record(1, late),  # ok but one late frame, TTFA 200
        record(2, on_schedule(10, t0=300.0)),  # viable, TTFA 300
        record(3, [], status=None, close_code=1013),  # refused
    ]
    s = summarize(records, 0.0, Slo(), rate=2.0)
    assert s["requests"] == 4 and s["ok"] == 3 and s["failed"] == 1 and s["viable"] == 2
    assert s["viability"] == 0.5
    assert s["failures"] == {"close_1013": 1}
    assert s["ttfa_ms"]["p50"] == 200.0 and s["ttfa_ms"]["n"] == 3  # the refused one had none
    assert s["underrun_ms_total"] == pytest.approx(80.0) and s["requests_with_underrun"] == 1
    assert s["late_frames"] == 4  # fixed deadlines: 7-9 (due 340-380) are late too
    assert s["audio_s_received"] == pytest.approx(0.6)
    assert s["achieved_rate"] == pytest.approx(3 / 1.5)
    assert describe_not_viable(s) == (
        "not viable: 1 close_1013, 1 completed with audio late (4 late frames, 1 with an underrun)"
    )
    assert describe_not_viable(summarize(records[:1], 0.0, Slo())) is None
    assert not s["passes"]


def test_slo_needs_both_ttfa_and_viability():
    good = [record(i, on_schedule(10, t0=100.0)) for i in range(100)]
    assert summarize(good, 0.0, Slo())["passes"]
    one_bad = good[:99] + [record(99, [], status="failed")]
    assert summarize(one_bad, 0.0, Slo())["passes"]  # exactly 99 % is enough
    two_bad = good[:98] + [record(98, [], status="failed"), record(99, [], status="failed")]
    assert not summarize(two_bad, 0.0, Slo())["passes"]
    slow = [record(i, on_schedule(10, t0=600.0)) for i in range(100)]
    summary = summarize(slow, 0.0, Slo())
    assert summary["viability"] == 1.0 and not summary["passes"]
    assert meets_slo(summary, Slo(p90_ttfa_ms=600.0))


def test_record_round_trips_through_json():
    rec = record(3, [10.004, 30.0, 50.0], late=True)
    rec.durations_ms, rec.frame_ms = [20.0, 20.0, 10.0], None
    data = rec.to_json()
    assert data["ok"] and data["failure"] is None and data["arrivals_ms"][0] == 10.0
    back = RequestRecord.from_json(data)
    assert back.frame_durations_ms() == [20.0, 20.0, 10.0] and back.received_audio_ms == 50.0
    assert back.late and back.ttfa_ms == 10.0


def test_ttfa_counts_requests_that_failed_after_their_first_frame():
    broke = record(1, on_schedule(3, t0=900.0), status="failed")
    s = summarize([record(0, on_schedule(10, t0=100.0)), broke], 0.0, Slo())
    assert s["ttfa_ms"]["n"] == 2 and s["ttfa_ms"]["max"] == 900.0
    assert s["viable"] == 1 and s["failures"] == {"status_failed": 1}
