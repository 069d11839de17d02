"""A pool of engine replicas (gateway/replica_pool.py) on fake engines, no Ray: a request the
pool places itself is judged as its own engine would judge it. The live pool on Ray is
tests/scaleout's."""

from __future__ import annotations

import pytest

from engine.api import EngineOverloaded
from engine.outputs import EngineStats, SpeechRequest, StepTiming
from gateway.config import GatewaySettings
from gateway.replica_pool import ReplicaPool
from gateway.supervisor import RestartPolicy, SupervisedEngine

FAST = RestartPolicy(backoff_s=0.05, max_backoff_s=0.2, max_failures=3, window_s=60, poll_s=0.02)


class FakeReplica:
    """What a supervisor and the pool read of an engine: its stats (`realtime_refusal`: why
    real-time admission would refuse a stream), and the requests submitted to it."""

    facts = None
    failure: str | None = None
    ready = True

    def __init__(self, realtime_refusal: str = "") -> None:
        self.realtime_refusal = realtime_refusal
        self.submitted: list[SpeechRequest] = []

    def stats(self) -> EngineStats:
        return EngineStats(
            0, 0, 100, 0, 0, StepTiming(), self.ready, realtime_refusal=self.realtime_refusal
        )

    async def submit(self, request: SpeechRequest) -> str:
        self.submitted.append(request)
        return f"stream of {request.text}"

    async def shutdown(self) -> None:
        pass


def pool_of(*engines: FakeReplica) -> ReplicaPool:
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
