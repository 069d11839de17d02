"""Real-time admission's side of a bench point, from the server's /metrics.

A refused listener is counted by the client, but not why: the engine's refusals by cause
(`voxgate_engine_admission_refusals_total{cause=…}`: turn_cost, codec, slow_start, listeners,
kv) and the turn cost it predicted capacity from (gateway/metrics.py ADMISSION_GAUGES) say
whether the cost model or the listeners' buffer guard held the surplus back, and how many
streams it thought would fit. Two readings around a point give the refusals during it; the
gauges are the reading at its end.
"""

from __future__ import annotations

from typing import Any

from voxbench.servers import metrics_body

REFUSALS = "voxgate_engine_admission_refusals_total"
GAUGES = {
    "voxgate_engine_realtime_capacity_streams": "capacity_streams",
    "voxgate_engine_turn_fixed_seconds": "turn_fixed_s",
    "voxgate_engine_turn_row_seconds": "turn_per_row_s",
    "voxgate_engine_turn_samples": "turn_samples",
}


def parse_admission(body: str) -> dict[str, Any]:
    """{'refusals': {cause: count}, and each of GAUGES' fields found} from a /metrics text."""
    refusals: dict[str, float] = {}
    found: dict[str, Any] = {}
    for line in body.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(REFUSALS + "{cause="):
            cause = name[len(REFUSALS) + len("{cause=") : -1].strip('"')
            refusals[cause] = float(value)
        elif name in GAUGES:
            found[GAUGES[name]] = float(value)
    return {"refusals": refusals, **found}


def read_admission(http: str) -> dict[str, Any] | None:
    body = metrics_body(http)
    return None if body is None else parse_admission(body)


def admission_during(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The refusals between two readings, by cause, and the gauges at the second."""
    if before is None or after is None:
        return None
    old = before["refusals"]
    refusals = {
        cause: int(count - old.get(cause, 0.0))
        for cause, count in sorted(after["refusals"].items())
        if count > old.get(cause, 0.0)
    }
    return {**{k: v for k, v in after.items() if k != "refusals"}, "refusals": refusals}


def describe_admission(view: dict[str, Any] | None) -> list[str]:
    """The view as a log line (none when the server has no admission figures)."""
    if not view or "capacity_streams" not in view:
        return []
    causes = ", ".join(f"{c} {n}" for c, n in view["refusals"].items()) or "none"
    fit = (
        f"turn {1e3 * view['turn_fixed_s']:.2f} ms + {1e3 * view['turn_per_row_s']:.3f} ms/row"
        if view.get("turn_per_row_s")
        else "turn cost not fitted"
    )
    return [
        f"engine admission: room for {int(view['capacity_streams'])} streams ({fit}); "
        f"refused by cause: {causes}"
    ]
