"""The throughput burst submits every request at once: an engine that answers each submit
after a round trip (an engine process, between its steps) must not see them one by one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

from engine.outputs import AudioChunk, Finished, FinishReason
from voxbench.throughput import measure_rtf
from voxbench.workload import DEFAULT_WORKLOAD, burst_plan, load_workload

ROUND_TRIP_S = 0.05


class SlowSubmitEngine:
    """Each submit takes a round trip; each stream then gives 0.1 s of audio at once."""

    facts = SimpleNamespace(token_rate_hz=10.0, sampling_defaults={})

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0

    async def submit(self, request):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(ROUND_TRIP_S)
        self.in_flight -= 1
        return self._stream()

    async def _stream(self):
        yield AudioChunk("r", np.zeros(2400, dtype=np.float32), 24000)
        yield Finished("r", FinishReason.LENGTH, 1)


async def test_a_burst_is_submitted_at_once_not_one_round_trip_after_another():
    engine = SlowSubmitEngine()
    plan = burst_plan(load_workload(DEFAULT_WORKLOAD, max_audio_seconds=0.5), 20, 10.0)
    result = await measure_rtf(engine, plan, warmup=0)
    assert result["requests"] == 20 and result["finish"] == {"length": 20}
    assert engine.most_in_flight == 20  # every submit out before any came back
    # One round trip, not twenty: every stream's first audio within a few of them.
    assert result["wall_s"] < 5 * ROUND_TRIP_S
    assert result["first_audio_ms"]["max"] < 5 * 1000 * ROUND_TRIP_S
