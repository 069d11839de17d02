"""`/metrics` for a pool of engine replicas (gateway/replica_pool.py): each replica's figures
labelled `replica`, beside the engine gauges of gateway/metrics.py, which show the pool's
figures added up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.replica_pool import ReplicaPool

# metric name → (help, what it reads of a replica: its supervisor, stats and pinned sessions)
_GAUGES = {
    "voxgate_replica_up": ("1 while the replica serves", lambda r, s, n: int(r.ready)),
    "voxgate_replica_healthy": (
        "0 once the replica's supervisor has given up restarting it",
        lambda r, s, n: int(r.healthy),
    ),
    "voxgate_replica_sessions": ("Open sessions pinned to the replica", lambda r, s, n: n),
    "voxgate_replica_running_requests": ("Requests decoding", lambda r, s, n: s.running),
    "voxgate_replica_waiting_requests": (
        "Requests admitted, not yet prefilled",
        lambda r, s, n: s.waiting,
    ),
    "voxgate_replica_kv_blocks_used": ("KV cache pages in use", lambda r, s, n: s.kv_blocks_used),
    "voxgate_replica_kv_blocks_total": (
        "KV cache pages in the pool",
        lambda r, s, n: s.kv_blocks_total,
    ),
    "voxgate_replica_realtime_room": (
        "1 while real-time admission would take another stream",
        lambda r, s, n: int(s.realtime_room),
    ),
    "voxgate_replica_seconds_since_restart": (
        "Seconds since the replica serving now became ready",
        lambda r, s, n: r.seconds_since_start(),
    ),
}


class ReplicaCollector(Collector):
    def __init__(self, pool: ReplicaPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        pool = self._pool
        rows = [
            (name, replica, replica.stats(), pinned)
            for name, replica, pinned in zip(pool.names, pool.replicas, pool.pinned, strict=True)
        ]
        for metric, (help_text, read) in _GAUGES.items():
            family = GaugeMetricFamily(metric, help_text, labels=["replica"])
            for name, replica, stats, pinned in rows:
                family.add_metric([name], read(replica, stats, pinned))
            yield family
        steps = CounterMetricFamily("voxgate_replica_steps", "Engine steps run", labels=["replica"])
        restarts = CounterMetricFamily(
            "voxgate_replica_restarts", "Replicas built in place of a dead one", labels=["replica"]
        )
        deaths = CounterMetricFamily(
            "voxgate_replica_deaths", "Replicas that died while serving", labels=["replica"]
        )
        restart_failures = CounterMetricFamily(
            "voxgate_replica_restart_failures",
            "Rebuilds of the dead replica that failed (to be placed, to load, or to be prepared)",
            labels=["replica"],
        )
        last_death = GaugeMetricFamily(
            "voxgate_replica_last_death",
            "Why the replica's last engine died (label reason); 1 once one has",
            labels=["replica", "reason"],
        )
        last_restart_failure = GaugeMetricFamily(
            "voxgate_replica_last_restart_failure",
            "Why the replica's last rebuild failed (label reason); 1 once one has",
            labels=["replica", "reason"],
        )
        for name, replica, stats, _ in rows:
            record = replica.record
            steps.add_metric([name], stats.steps)
            restarts.add_metric([name], record.restarts)
            deaths.add_metric([name], record.deaths)
            restart_failures.add_metric([name], record.restart_failures)
            if record.last_death:
                last_death.add_metric([name, record.last_death[:200]], 1)
            if record.last_restart_failure:
                last_restart_failure.add_metric([name, record.last_restart_failure[:200]], 1)
        yield from (steps, restarts, deaths, restart_failures, last_death, last_restart_failure)
        yield GaugeMetricFamily(
            "voxgate_replicas_ready",
            "Replicas serving now",
            value=sum(r.ready for r in pool.replicas),
        )
