"""Every metric gateway/metrics.py exports is in docs/gateway.md's metrics table: the engine's
figures read at scrape time, the gateway's own, and those of the supervisor and the codec
processes, which appear once they are watched."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from engine.api import EngineStats, StepTiming
from gateway.codec_workers import ENCODERS, MIC_DECODERS
from gateway.metrics import GatewayMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def exported_names() -> set[str]:
    """Every metric family a fully watched GatewayMetrics exports."""
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True)
    metrics = GatewayMetrics(lambda: stats)
    for role in (ENCODERS, MIC_DECODERS):
        metrics.watch_codec_workers(SimpleNamespace(role=role, alive=1, restarts=0))
    record = SimpleNamespace(restarts=1, healthy=True, last_reason="killed")
    metrics.watch_supervisor(SimpleNamespace(record=record, seconds_since_start=lambda: 1.0))
    return {family.name for family in metrics.registry.collect()}


def documented_names() -> set[str]:
    """The metric names docs/gateway.md spells out (a counter's with or without `_total`)."""
    names = set()
    for name in re.findall(r"voxgate_[a-z0-9_]+", DOC.read_text()):
        names |= {name, name.removesuffix("_total")}
    return names


def test_every_exported_metric_is_documented():
    exported = exported_names()
    assert "voxgate_engine_lane_jobs" in exported and "voxgate_encoder_processes_alive" in exported
    missing = sorted(exported - documented_names())
    assert not missing, f"add to docs/gateway.md's metrics table: {', '.join(missing)}"
