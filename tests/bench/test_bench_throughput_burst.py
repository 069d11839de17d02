"""The throughput burst submits every request at once: an engine that answers each submit
after a round trip (an engine process, between its steps) must not see them one by one."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from engine.outputs import AudioChunk, Finished, FinishReason, LoopTotals
from voxbench.engine_loop import describe_loop
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


class CountingEngine(SlowSubmitEngine):
    """The same burst from an engine that keeps loop counters: each stream's audio is one
    LLM step of 4 ms carrying 2 rows and one codec job of 1 ms."""

    def __init__(self) -> None:
        super().__init__()
        self.totals = LoopTotals()

    def stats(self):
        return SimpleNamespace(totals=dataclasses.replace(self.totals))

    async def _stream(self):
        await asyncio.sleep(0.01)
        t = self.totals
        t.loop_turns, t.loop_s = t.loop_turns + 1, t.loop_s + 0.005
        t.llm_steps, t.llm_s, t.rows = t.llm_steps + 1, t.llm_s + 0.004, t.rows + 2
        t.codec_jobs, t.codec_s, t.codec_rows = (
            t.codec_jobs + 1,
            t.codec_s + 0.001,
            t.codec_rows + 1,
        )
        t.audio_s += 0.1
        yield AudioChunk("r", np.zeros(2400, dtype=np.float32), 24000)
        yield Finished("r", FinishReason.LENGTH, 1)


async def test_the_burst_says_where_the_engines_time_went():
    # What the served points log (voxbench/engine_loop.py), for the burst: its steps, rows and
    # codec jobs from the engine's counters around it, the warm-up's left out.
    engine = CountingEngine()
    plan = burst_plan(load_workload(DEFAULT_WORKLOAD, max_audio_seconds=0.5), 20, 10.0)
    result = await measure_rtf(engine, plan, warmup=2)
    loop = result["engine_loop"]
    assert loop["llm_step_ms"] == 4.0 and loop["rows_per_step"] == 2.0
    assert loop["codec_jobs"] == 20 and loop["codec_job_ms"] == 1.0  # the warm-up's 2 left out
    assert loop["llm_steps_per_s"] == pytest.approx(20 / result["wall_s"], rel=0.05)
    assert sum(s["steps_per_s"] for s in loop["steps_by_second"].values()) > 0
    lines = describe_loop(loop)
    assert lines[0].startswith("engine loop:") and "LLM steps by second" in lines[-1]
    # An engine without counters (the Hugging Face baseline) has no profile.
    bare = await measure_rtf(SlowSubmitEngine(), plan, warmup=0)
    assert bare["engine_loop"] is None
