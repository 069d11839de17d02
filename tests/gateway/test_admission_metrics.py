"""Real-time admission on /metrics (gateway/metrics.py): what the engine predicts and why it
refused, read from EngineStats.admission."""

from __future__ import annotations

from prometheus_client import generate_latest

from engine.outputs import AdmissionStats, EngineStats, StepTiming
from gateway.metrics import GatewayMetrics


def metrics_text(admission: AdmissionStats) -> str:
    """The gateway's /metrics text for an engine whose admission stands at `admission`."""
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True, realtime_room=False)
    stats = EngineStats(**{**stats.__dict__, "admission": admission})
    return generate_latest(GatewayMetrics(lambda: stats).registry).decode()


def test_admission_figures_and_refusals_by_cause_are_exported():
    admission = AdmissionStats(
        streams=42,
        capacity_streams=57,
        turn_fixed_s=0.008,
        turn_per_row_s=0.00004,
        live_turns=256,
        settled_listeners=40,
        short_listeners=3,
        refusals={"turn_cost": 12, "listeners": 5},
    )
    text = metrics_text(admission)
    for line in (
        "voxgate_engine_realtime_room 0.0",
        "voxgate_engine_realtime_streams 42.0",
        "voxgate_engine_realtime_capacity_streams 57.0",
        "voxgate_engine_turn_fixed_seconds 0.008",
        "voxgate_engine_turn_row_seconds 4e-05",
        "voxgate_engine_listeners_short 3.0",
        'voxgate_engine_admission_refusals_total{cause="turn_cost"} 12.0',
        'voxgate_engine_admission_refusals_total{cause="listeners"} 5.0',
    ):
        assert line in text, line
