"""Every metric gateway/metrics.py exports is in docs/gateway.md's metrics table: the engine's
figures read at scrape time, the gateway's own, and those of the supervisor and the codec
processes, which appear once they are watched; and every one a replica pool adds or keeps
(gateway/replica_metrics.py, its supervision as one engine's) is in docs/scale-out.md."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from engine.api import EngineStats, StepTiming
from gateway.codec_workers import ENCODERS, MIC_DECODERS
from gateway.metrics import GatewayMetrics, SupervisorCollector
from gateway.replica_records import pooled_record
from gateway.supervisor import RestartRecord

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def exported_names() -> set[str]:
    """Every metric family a fully watched GatewayMetrics exports."""
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True)
    metrics = GatewayMetrics(lambda: stats)
    for role in (ENCODERS, MIC_DECODERS):
        metrics.watch_codec_workers(SimpleNamespace(role=role, alive=1, restarts=0))
    record = SimpleNamespace(
        restarts=1,
        deaths=2,
        restart_failures=1,
        healthy=True,
        last_reason="restart failed: out of memory",
        last_death="killed",
        last_restart_failure="restart failed: out of memory",
    )
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


def replica_pool() -> SimpleNamespace:
    """What the metrics read of a pool of one replica whose engine died once and failed a
    rebuild once: every labelled family has a sample."""
    record = RestartRecord(
        restarts=1,
        deaths=1,
        restart_failures=1,
        last_reason="restart failed: out of memory",
        last_death="killed",
        last_restart_failure="restart failed: out of memory",
        last_death_at=1.0,
        last_restart_failure_at=2.0,
    )
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True)
    replica = SimpleNamespace(
        ready=True, healthy=True, seconds_since_start=lambda: 1.0, record=record
    )
    replica.stats = lambda: stats
    return SimpleNamespace(
        names=["replica-0"],
        replicas=[replica],
        pinned=[0],
        record=pooled_record(["replica-0"], [record]),
        seconds_since_start=lambda: 1.0,
        stats=lambda: stats,
    )


def replica_pool_exports() -> set[str]:
    """Every metric family a gateway serving from a replica pool exports (as the app watches
    one)."""
    pool = replica_pool()
    metrics = GatewayMetrics(pool.stats)
    metrics.watch_supervisor(pool)
    metrics.watch_replicas(pool)
    return {family.name for family in metrics.registry.collect()}


def test_every_replica_metric_is_in_the_scale_out_doc():
    """A replica pool's per-replica metrics (gateway/replica_metrics.py) are listed in
    docs/scale-out.md, in full or by their suffix after `voxgate_replica`; its supervision
    metrics (the replicas' as one engine's) by name."""
    exported = replica_pool_exports()
    assert "voxgate_replica_up" in exported and "voxgate_replicas_ready" in exported
    assert "voxgate_replica_restart_failures" in exported
    doc = (DOC.parent / "scale-out.md").read_text()
    replica_names = {name for name in exported if name.startswith("voxgate_replica")}
    missing = sorted(
        name
        for name in replica_names
        if name not in doc and f"`{name.removeprefix('voxgate_replica')}" not in doc
    )
    assert not missing, f"add to docs/scale-out.md's metrics: {', '.join(missing)}"
    supervision = {family.name for family in SupervisorCollector(replica_pool()).collect()}
    assert "voxgate_engine_restart_failures" in supervision
    missing = sorted(name for name in supervision if name not in doc)
    assert not missing, f"add to docs/scale-out.md's metrics (pooled): {', '.join(missing)}"


def test_every_metric_a_replica_pool_exports_is_documented():
    exported = replica_pool_exports()
    assert "voxgate_engine_deaths" in exported and "voxgate_engine_last_restart_failure" in exported
    documented = documented_names() | {
        name
        for name in exported
        if name.startswith("voxgate_replica")  # the scale-out doc's (test above)
    }
    missing = sorted(exported - documented)
    assert not missing, f"add to docs/gateway.md's metrics table: {', '.join(missing)}"
