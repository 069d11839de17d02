"""Where a late stream's first late chunk lost its time (voxbench/late_chunks.py): matched to
its trace by response id, on the clock the served engine and the clients share."""

from __future__ import annotations

import pytest

from voxbench.late_chunks import describe_late_chunks, late_chunk_timing

FRAME_MS = 20.0


def trace(response_id: str, arrival: float, chunks: list[tuple[float, float, float]]) -> dict:
    """A request trace with chunks of (audio_ms, out_ms after arrival, buffered_ms at out)."""
    return {
        "request_id": f"{response_id}-s0",
        "arrival": arrival,
        "chunks": [{"audio_ms": a, "out_ms": o, "buffered_ms": b} for a, o, b in chunks],
    }


def record(response_id: str, sent_at: float, arrivals_ms: list[float], late: bool) -> dict:
    return {
        "response_id": response_id,
        "sent_at": sent_at,
        "arrivals_ms": arrivals_ms,
        "frame_ms": FRAME_MS,
        "late": late,
    }


def test_a_late_chunk_is_split_into_the_engines_lead_and_the_way_to_the_client():
    """A first chunk of 300 ms (15 frames) reaches the client 120 ms after the send; the second
    leaves the codec 400 ms after the engine got the request with 50 ms of the listener's audio
    left, and reaches the client 470 ms after the send: 60 ms on the way (the send was 10 ms
    before the engine's arrival), its first frame due at 420 ms, so 50 ms late."""
    first = [120.0 + 0.1 * i for i in range(15)]
    second = [470.0 + 0.1 * i for i in range(15)]
    late = record("resp_a", 99.99, first + second, late=True)
    on_time = record("resp_b", 99.99, first, late=False)
    traces = [
        trace("resp_a", 100.0, [(300.0, 100.0, 0.0), (300.0, 400.0, 50.0)]),
        trace("resp_b", 100.0, [(300.0, 100.0, 0.0)]),
        {**trace("resp_a", 101.0, [(300.0, 1.0, 0.0)]), "request_id": "resp_a-s1"},
    ]
    timing = late_chunk_timing([late, on_time], traces)
    assert timing is not None and timing["n"] == 1
    assert timing["engine_lead_ms"]["p50"] == 50.0
    assert timing["delivery_ms"]["p50"] == pytest.approx(60.0)
    assert timing["late_by_ms"]["p50"] == pytest.approx(50.0)
    (line,) = describe_late_chunks(timing)
    assert "50.0 ms of the listener's audio left" in line and "60.0 ms from there" in line


def test_nothing_to_say_without_a_late_stream_matched_to_its_trace():
    traces = [trace("resp_a", 100.0, [(300.0, 100.0, 0.0)])]
    unmatched = record("resp_x", 99.99, [120.0, 500.0], late=True)
    no_id = {**record("resp_a", 99.99, [120.0, 500.0], late=True), "response_id": None}
    assert late_chunk_timing([unmatched, no_id], traces) is None
    assert late_chunk_timing([record("resp_a", 99.99, [120.0, 140.0], late=False)], traces) is None
    assert describe_late_chunks(None) == []
