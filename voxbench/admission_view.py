"""Real-time admission's side of a bench point, from the server's /metrics.

A refused listener is counted by the client, but not why. The server counts every refusal
once, by cause, in one of two families: the engine's, for requests it refused at submit
(`voxgate_engine_admission_refusals_total{cause=…}`: turn_cost, codec, slow_start, listeners,
kv; with replicas, also the pool's own), and the gateway's, for sessions (and HTTP speech
requests) refused before anything reached the engine
(`voxgate_gateway_admission_refusals_total{cause=…}`: the same real-time causes and kv, as
the engine's stats answered at `session.start`, plus not_ready, waiting, max_sessions,
key_sessions). Together they add up to what the clients counted as refused. With the turn
cost the engine predicted capacity from (gateway/metrics.py ADMISSION_GAUGES) they say whether
the cost model, the listeners' buffer guard or a gateway limit held the surplus back, and how
many streams it thought would fit; how well its turn model foresaw the point's turns comes
from the point's request trace (voxbench/turn_accuracy.py). Two readings around a point give the refusals during it;
the gauges are the reading at its end, and the room by second (`room_by_second`) and the turn
cost's fit by second (`turn_fit_by_second`) how the prediction moved through the point: at its
end the turn-cost window holds the tail's small turns, so the end's figure alone says little
about the ramp.
"""

from __future__ import annotations

from typing import Any

# /metrics family → the view's key: refused at submit by the engine, and before it by the gateway.
REFUSALS = {
    "voxgate_engine_admission_refusals_total": "refusals",
    "voxgate_gateway_admission_refusals_total": "gateway_refusals",
}
GAUGES = {
    "voxgate_engine_realtime_capacity_streams": "capacity_streams",
    "voxgate_engine_turn_fixed_seconds": "turn_fixed_s",
    "voxgate_engine_turn_row_seconds": "turn_per_row_s",
    "voxgate_engine_turn_page_seconds": "turn_per_page_s",
    "voxgate_engine_turn_samples": "turn_samples",
    "voxgate_engine_codec_job_fixed_seconds": "codec_fixed_s",
    "voxgate_engine_codec_seconds_per_audio_second": "codec_per_audio_s",
}


def parse_admission(body: str) -> dict[str, Any]:
    """{'refusals': {cause: count} (the engine's), 'gateway_refusals': {cause: count}, and
    each of GAUGES' fields found} from a /metrics text."""
    refusals: dict[str, dict[str, float]] = {key: {} for key in REFUSALS.values()}
    found: dict[str, Any] = {}
    for line in body.splitlines():
        name, _, value = line.rpartition(" ")
        family, _, labels = name.partition("{cause=")
        if family in REFUSALS and labels:
            refusals[REFUSALS[family]][labels[:-1].strip('"')] = float(value)
        elif name in GAUGES:
            found[GAUGES[name]] = float(value)
    return {**refusals, **found}


def room_by_second(readings: list[tuple[float, dict[str, Any] | None]]) -> dict[int, int]:
    """(seconds into the point, admission view) readings → the room admission predicted at
    each, keyed by its second (the last reading of a second wins)."""
    return {
        int(t): int(view["capacity_streams"])
        for t, view in readings
        if view is not None and "capacity_streams" in view
    }


def admission_during(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The refusals between two readings, by cause (the engine's and the gateway's), and the
    gauges at the second."""
    if before is None or after is None:
        return None
    view = {k: v for k, v in after.items() if k not in REFUSALS.values()}
    for key in REFUSALS.values():
        old = before.get(key, {})
        view[key] = {
            cause: int(count - old.get(cause, 0.0))
            for cause, count in sorted(after.get(key, {}).items())
            if count > old.get(cause, 0.0)
        }
    return view


def turn_fit_by_second(
    readings: list[tuple[float, dict[str, Any] | None]],
) -> dict[int, tuple[float, ...]]:
    """(seconds into the point, admission view) readings → the turn cost admission judged by
    at each, (fixed ms, ms a row) and, where it prices KV pages, µs a page, keyed by its second
    (the last reading of a second wins): the fit follows a window of the last few seconds'
    turns and the page's price is learned from them, so how both moved through the ramp says
    what each refusal was judged by."""
    fits: dict[int, tuple[float, ...]] = {}
    for t, view in readings:
        if view is None or view.get("turn_fixed_s", 0.0) + view.get("turn_per_row_s", 0.0) <= 0:
            continue  # not fitted (yet)
        fit = (round(1e3 * view["turn_fixed_s"], 2), round(1e3 * view["turn_per_row_s"], 4))
        page_us = round(1e6 * view.get("turn_per_page_s", 0.0), 3)
        fits[int(t)] = (*fit, page_us) if page_us > 0 else fit
    return fits


def _fit_text(fit: tuple[float, ...] | list[float]) -> str:
    text = f"{fit[0]:g}+{fit[1]:g}"
    return text + f"+{fit[2]:g}us" if len(fit) > 2 else text


def _causes(refusals: dict[str, int]) -> str:
    return ", ".join(f"{c} {n}" for c, n in refusals.items()) or "none"


def describe_admission(view: dict[str, Any] | None) -> list[str]:
    """The view as a log line (none when the server has no admission figures)."""
    if not view or "capacity_streams" not in view:
        return []
    engine, gateway = view["refusals"], view.get("gateway_refusals", {})
    total = sum(engine.values()) + sum(gateway.values())
    fit = (
        f"turn {1e3 * view['turn_fixed_s']:.2f} ms + {1e3 * view['turn_per_row_s']:.3f} ms/row"
        if view.get("turn_fixed_s", 0.0) + view.get("turn_per_row_s", 0.0) > 0  # fitted
        else "turn cost not fitted"
    )
    if view.get("turn_per_page_s"):
        fit += f" + {1e6 * view['turn_per_page_s']:.3f} us/page"
    if view.get("codec_per_audio_s"):
        fit += (
            f"; codec {1e3 * view['codec_fixed_s']:.2f} ms a job + "
            f"{1e3 * view['codec_per_audio_s']:.2f} ms per s of audio"
        )
    lines = [
        f"engine admission: room for {int(view['capacity_streams'])} streams ({fit}); "
        f"refused by cause: {total} in all; by the engine at submit: {_causes(engine)}; "
        f"at session start: {_causes(gateway)}"
    ]
    if view.get("room_by_second"):
        lines.append(
            "admission room by second of the point: "
            + " ".join(f"{s}s:{n}" for s, n in view["room_by_second"].items())
        )
    if view.get("turn_fit_by_second"):
        lines.append(
            "admission turn fit by second (ms + ms/row [+ µs/page]): "
            + " ".join(f"{s}s:{_fit_text(fit)}" for s, fit in view["turn_fit_by_second"].items())
        )
    foreseen = view.get("turn_model_vs_measured") or {}
    if any(ratio is not None for ratio in foreseen.values()):
        lines.append(
            "admission's turn model against the point's turns (predicted over measured, "
            "turn-weighted), by how far ahead it predicted: "
            + " ".join(f"{ahead}:{ratio:.3f}" for ahead, ratio in foreseen.items() if ratio)
        )
    return lines
