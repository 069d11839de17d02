"""The supervision of a pool of engine replicas as one supervisor's (gateway/supervisor.py:
RestartRecord), for the `voxgate_engine_*` supervision metrics one engine exports
(gateway/metrics.py: SupervisorCollector); each replica's own are labelled `replica`
(gateway/replica_metrics.py)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.supervisor import RestartRecord


def pooled_record(names: Sequence[str], records: Sequence[RestartRecord]) -> RestartRecord:
    """Deaths, restarts and failed restarts added up; healthy while any replica's supervisor
    still tries (as /health); the latest death and the latest failed restart of any replica,
    their reasons naming it; started_at the latest (re)start."""
    if not records:
        raise ValueError("a pool's record needs at least one replica's")
    rows = list(zip(names, records, strict=True))
    death_name, death = max(rows, key=lambda row: row[1].last_death_at)
    failure_name, failure = max(rows, key=lambda row: row[1].last_restart_failure_at)
    last_death = f"{death_name}: {death.last_death}" if death.last_death else ""
    last_failure = (
        f"{failure_name}: {failure.last_restart_failure}" if failure.last_restart_failure else ""
    )
    failure_is_latest = failure.last_restart_failure_at > death.last_death_at
    return RestartRecord(
        restarts=sum(r.restarts for r in records),
        deaths=sum(r.deaths for r in records),
        restart_failures=sum(r.restart_failures for r in records),
        started_at=max(r.started_at for r in records),
        last_reason=last_failure if failure_is_latest else last_death,
        last_death=last_death,
        last_restart_failure=last_failure,
        healthy=any(r.healthy for r in records),
        last_death_at=death.last_death_at,
        last_restart_failure_at=failure.last_restart_failure_at,
    )
