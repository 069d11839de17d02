"""Where a late stream's first late chunk lost its time: in the engine, or between the engine
and the client (the gateway's event transport, encode and socket).

For each late stream of a served point (`voxgate bench --serve`: the server and its clients on
one host, so the engine's trace and the client's records share the monotonic clock), the
chunk that carried its first late frame is found in the request's trace (matched by the
response id `response.started` gave the client) and set against the client's arrivals:

- `engine_lead_ms`: the listener's audio the engine saw left when the codec made the chunk
  (its trace's `buffered_ms`): what the engine's own schedule left for the rest of the way;
- `delivery_ms`: from the codec making the chunk to its first frame reaching the client;
- `late_by_ms`: how late that first late frame was.

A chunk late with a lead under its delivery was sent too late by the engine for the way it had
to go; one with a lead well over it was held up on the way. The record's frames are matched to
the trace's chunks by their audio: a chunk's first frame is the one its preceding audio ends in
(the encoder carries less than a frame from one chunk to the next).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.response import segment_request_id
from voxbench.metrics import distribution, frame_lateness


def late_chunk_timing(
    records: Sequence[dict[str, Any]], traces: Iterable[dict[str, Any]], buffer_ms: float = 0.0
) -> dict[str, Any] | None:
    """The late streams' first late chunks (module docstring); None when no late stream can be
    matched to its trace (no late stream, or records without a response id or send time). A
    response's engine requests are its sentence segments; its audio starts with the first."""
    by_id = {trace["request_id"]: trace for trace in traces}
    leads, deliveries, lateness = [], [], []
    for record in records:
        if not record.get("late") or not record.get("response_id"):
            continue
        trace = by_id.get(segment_request_id(record["response_id"], 0))
        if trace is None or record.get("sent_at") is None:
            continue
        found = _first_late_chunk(record, trace, buffer_ms)
        if found is not None:
            leads.append(found[0])
            deliveries.append(found[1])
            lateness.append(found[2])
    if not leads:
        return None
    return {
        "n": len(leads),
        "engine_lead_ms": distribution(leads),
        "delivery_ms": distribution(deliveries),
        "late_by_ms": distribution(lateness),
    }


def _first_late_chunk(
    record: dict[str, Any], trace: dict[str, Any], buffer_ms: float
) -> tuple[float, float, float] | None:
    """(the engine's lead at the codec, the way to the client, the frame's lateness) of the
    chunk holding `record`'s first late frame; None when its trace holds no such chunk."""
    arrivals, frame_ms = record["arrivals_ms"], record.get("frame_ms")
    if not arrivals or not frame_ms:
        return None
    lateness = frame_lateness(arrivals, [frame_ms] * len(arrivals), buffer_ms)
    late = next((i for i, x in enumerate(lateness) if x > 0), None)
    if late is None:
        return None
    heard_ms = 0.0  # the audio of the chunks before this one
    for chunk in trace["chunks"]:
        first = int(heard_ms // frame_ms)
        heard_ms += chunk["audio_ms"]
        if late < int(heard_ms // frame_ms):
            made_at = trace["arrival"] + chunk["out_ms"] / 1000
            reached_at = record["sent_at"] + arrivals[first] / 1000
            return chunk["buffered_ms"], 1000 * (reached_at - made_at), lateness[late]
    return None


def describe_late_chunks(timing: dict[str, Any] | None) -> list[str]:
    """The bench's log line for late_chunk_timing ([] when there is none)."""
    if not timing:
        return []
    lead, delivery = timing["engine_lead_ms"], timing["delivery_ms"]
    return [
        f"late streams' first late chunks ({timing['n']}): the engine had {lead['p50']} ms of "
        f"the listener's audio left when the codec made them (p50; p90 {lead['p90']}), and "
        f"they took {delivery['p50']} ms from there to the client (p50; p90 {delivery['p90']}, "
        f"max {delivery['max']})"
    ]
