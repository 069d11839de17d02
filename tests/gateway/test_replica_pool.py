"""A pool of engine replicas (gateway/replica_pool.py) on fake engines, no Ray: a request the
pool places itself is judged as its own engine would judge it, the pool's counters never go
down when a replica restarts, and /metrics has the supervision figures one engine has, pooled,
beside each replica's. The live pool on Ray is tests/scaleout's."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.testclient import TestClient

from engine.api import EngineOverloaded
from engine.outputs import AdmissionStats, EngineStats, LoopTotals, SpeechRequest, StepTiming
from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.replica_pool import ReplicaPool
from gateway.replica_records import pooled_record
from gateway.supervisor import RestartPolicy, RestartRecord, SupervisedEngine

FAST = RestartPolicy(backoff_s=0.05, max_backoff_s=0.2, max_failures=3, window_s=60, poll_s=0.02)


class FakeReplica:
    """What a supervisor and the pool read of an engine: its stats (`realtime_refusal`: why
    real-time admission would refuse a stream; `steps`: how far its counters have come, each
    counter a multiple of it), and the requests submitted to it. `die()` kills it."""

    facts = None
    failure: str | None = None
    ready = True

    def __init__(self, realtime_refusal: str = "", steps: int = 0) -> None:
        self.realtime_refusal = realtime_refusal
        self.steps = steps
        self.submitted: list[SpeechRequest] = []

    def die(self) -> None:
        self.failure, self.ready = "the engine process was killed by SIGKILL", False

    def stats(self) -> EngineStats:
        n = self.steps
        return EngineStats(
            0,
            0,
            100,
            0,
            n,
            StepTiming(),
            self.ready,
            prefix_reused_tokens=3 * n,
            totals=LoopTotals(loop_turns=2 * n, audio_s=0.5 * n),
            realtime_refusal=self.realtime_refusal,
            admission=AdmissionStats(refusals={"kv": n, "listeners": 1} if n else {}),
        )

    async def submit(self, request: SpeechRequest) -> str:
        self.submitted.append(request)
        return f"stream of {request.text}"

    async def shutdown(self) -> None:
        pass


def pool_of(*engines: FakeReplica) -> ReplicaPool:
    """Supervised replicas of the engines given; each is rebuilt as a fresh engine, its
    counters at 0."""
    replicas = [SupervisedEngine(lambda: FakeReplica(), e, FAST) for e in engines]
    return ReplicaPool(replicas, [f"replica-{i}" for i in range(len(engines))], GatewaySettings())


async def test_a_request_no_one_plays_as_it_comes_is_placed_without_real_time_room():
    """Real-time admission never refuses a request with `realtime` False (an engine takes it in
    the room real-time streams leave): the pool places it though no replica has real-time
    room, and refuses a real-time request there with the nearest replica's cause."""
    full = [FakeReplica(realtime_refusal="listeners"), FakeReplica(realtime_refusal="turn_cost")]
    pool = pool_of(*full)
    batch = SpeechRequest("a file returned whole", realtime=False)
    assert await pool.submit(batch) == "stream of a file returned whole"
    assert [len(e.submitted) for e in full] in ([1, 0], [0, 1])
    with pytest.raises(EngineOverloaded, match="no engine replica has room"):
        await pool.submit(SpeechRequest("played as it comes"))
    assert sum(pool.refusals.values()) == 1 and set(pool.refusals) <= {"listeners", "turn_cost"}


def counters(stats: EngineStats) -> dict[str, float]:
    return {
        "steps": stats.steps,
        "prefix_reused_tokens": stats.prefix_reused_tokens,
        "loop_turns": stats.totals.loop_turns,
        "audio_s": stats.totals.audio_s,
        **{f"refused_{cause}": n for cause, n in stats.admission.refusals.items()},
    }


async def test_the_pools_counters_never_go_down_when_a_replica_restarts():
    """A rebuilt replica counts from 0; its supervisor carries the dead one's counters on, so
    the pool's sums (and the replica's own) stay where they were and grow from there."""
    engines = [FakeReplica(steps=100), FakeReplica(steps=10)]
    pool = pool_of(*engines)
    before = counters(pool.stats())
    assert before == {
        "steps": 110,
        "prefix_reused_tokens": 330,
        "loop_turns": 220,
        "audio_s": 55.0,
        "refused_kv": 110,
        "refused_listeners": 2,
    }
    pool.watch()
    try:
        engines[0].die()
        deadline = time.monotonic() + 10
        while pool.replicas[0].record.restarts < 1:
            assert time.monotonic() < deadline, "replica-0 was not rebuilt"
            await asyncio.sleep(0.02)
        assert counters(pool.stats()) == before  # the new replica's own counters are at 0
        assert counters(pool.replicas[0].stats())["steps"] == 100
        pool.replicas[0].engine.steps = 5  # the new replica runs on
        after = counters(pool.stats())
        assert after["steps"] == 115 and after["loop_turns"] == 230
        assert after["refused_kv"] == 115 and after["refused_listeners"] == 3
    finally:
        await pool.stop_watching()


def test_metrics_have_the_supervision_figures_of_one_engine_pooled_and_per_replica():
    """A replica dies, its first rebuild fails, its second serves: the engine's supervision
    metrics count them for the pool (reasons naming the replica), and the replica's own
    failed restarts are counted beside its deaths and restarts."""
    dying = FakeReplica()
    rebuilds = iter([RuntimeError("CUDA out of memory"), FakeReplica()])

    def rebuild() -> FakeReplica:
        built = next(rebuilds)
        if isinstance(built, Exception):
            raise built
        return built

    replicas = [
        SupervisedEngine(rebuild, dying, FAST),
        SupervisedEngine(FakeReplica, FakeReplica(), FAST),
    ]
    pool = ReplicaPool(replicas, ["replica-0", "replica-1"], GatewaySettings())
    settings = GatewaySettings(encode_processes=0, decode_processes=0)
    with TestClient(create_app(settings, pool)) as client:  # its lifespan watches the pool
        dying.die()
        deadline = time.monotonic() + 10
        while replicas[0].record.restarts < 1:
            assert time.monotonic() < deadline, "replica-0 was not rebuilt"
            time.sleep(0.02)
        text = client.get("/metrics").text
    killed = "replica-0: the engine process was killed by SIGKILL"
    failed = "replica-0: restart failed: RuntimeError: CUDA out of memory"
    for line in (
        "voxgate_engine_deaths_total 1.0",
        "voxgate_engine_restarts_total 1.0",
        "voxgate_engine_restart_failures_total 1.0",
        "voxgate_engine_healthy 1.0",
        "voxgate_engine_seconds_since_restart ",
        f'voxgate_engine_last_death{{reason="{killed}"}} 1.0',
        f'voxgate_engine_last_restart_failure{{reason="{failed}"}} 1.0',
        'voxgate_replica_restart_failures_total{replica="replica-0"} 1.0',
        'voxgate_replica_restart_failures_total{replica="replica-1"} 0.0',
        'voxgate_replica_last_restart_failure{reason="restart failed: RuntimeError: CUDA out of '
        'memory",replica="replica-0"} 1.0',
    ):
        assert line in text, line


def test_the_pools_record_is_the_latest_of_any_replica_and_healthy_while_one_tries():
    early = RestartRecord(deaths=2, restarts=1, last_death="killed", last_death_at=10.0)
    late = RestartRecord(
        deaths=1,
        restart_failures=2,
        last_death="out of memory",
        last_death_at=20.0,
        last_restart_failure="restart failed: no GPU",
        last_restart_failure_at=15.0,
        healthy=False,
    )
    pooled = pooled_record(["replica-0", "replica-1"], [early, late])
    assert (pooled.deaths, pooled.restarts, pooled.restart_failures) == (3, 1, 2)
    assert pooled.last_death == pooled.last_reason == "replica-1: out of memory"
    assert pooled.last_restart_failure == "replica-1: restart failed: no GPU"
    assert pooled.healthy  # replica-0's supervisor still tries
    late.healthy = early.healthy = False
    assert not pooled_record(["replica-0", "replica-1"], [early, late]).healthy
    assert pooled_record(["replica-0"], [RestartRecord()]).last_death == ""
