"""The async client: the engine loop survives callers that give up, and frees their work."""

from __future__ import annotations

import asyncio

from engine.config import EngineConfig
from engine.factory import build_engine
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams

# Real-time admission off: its calibration bursts at start-up (~1.5 s of CPU here) test
# nothing of the client. test_build_engine_warms_up_and_leaves_the_engine_empty keeps them.
CONFIG = EngineConfig(num_kv_blocks=256, realtime_admission=False)


async def wait_idle(engine, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        stats = engine.stats()
        if stats.running == 0 and stats.waiting == 0 and stats.kv_blocks_used == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"engine did not go idle: {engine.stats()}")


async def test_cancelled_submit_neither_kills_the_loop_nor_orphans_work():
    engine = build_engine("tiny-orpheus", config=CONFIG)
    try:
        long = SpeechRequest(
            "Hello there.", sampling=SamplingParams(max_tokens=2000, min_tokens=2000)
        )
        for delay in (0, 0.001, 0.01):  # cancel before, around and after admission
            task = asyncio.create_task(engine.submit(long))
            await asyncio.sleep(delay)
            task.cancel()
            (outcome,) = await asyncio.gather(task, return_exceptions=True)
            if not isinstance(outcome, BaseException):
                # submit() finished before the cancel landed: the caller owns a live stream
                # then, and ending it is the caller's job, as a gateway session does on close.
                engine.cancel(outcome.request_id)
            await wait_idle(engine)
            assert engine.ready
        stream = await engine.submit(
            SpeechRequest("Hi.", sampling=SamplingParams(max_tokens=21, min_tokens=21))
        )
        events = [e async for e in stream]
        assert isinstance(events[-1], Finished) and events[-1].reason == FinishReason.LENGTH
        assert sum(len(e.pcm) for e in events if isinstance(e, AudioChunk)) == 3 * 2048
    finally:
        await engine.shutdown()


async def test_cancel_ends_the_stream_with_cancelled():
    engine = build_engine("tiny-orpheus", config=CONFIG)
    try:
        stream = await engine.submit(
            SpeechRequest("Hello.", sampling=SamplingParams(max_tokens=2000))
        )
        first = await stream.get()
        assert isinstance(first, AudioChunk)
        engine.cancel(stream.request_id)
        rest = [e async for e in stream]
        assert rest[-1].reason == FinishReason.CANCELLED
        await wait_idle(engine)
    finally:
        await engine.shutdown()


async def test_build_engine_warms_up_and_leaves_the_engine_empty():
    engine = build_engine("tiny-orpheus", config=EngineConfig(num_kv_blocks=64))
    try:
        stats = engine.stats()
        assert engine.ready and stats.kv_blocks_used == 0 and stats.kv_blocks_reserved == 0
        assert stats.running == 0 and stats.waiting == 0
        assert engine.core.scheduler.detok_time_s > 0  # the warm-up ran the codec too
    finally:
        await engine.shutdown()


async def test_bad_commands_are_refused_and_a_dead_engine_fails_its_callers(monkeypatch):
    import numpy as np
    import pytest

    from engine.api import EngineDead, ModelInputError, TurnFromText

    engine = build_engine("tiny-orpheus", config=CONFIG)
    try:
        # Streamed audio for a text-to-speech engine is refused, and the loop goes on.
        engine.push_audio("nobody", np.zeros(160, np.float32))
        with pytest.raises(ModelInputError, match="not a turn-based model"):
            await engine.prepare_turn(TurnFromText("Hello."))
        stream = await engine.submit(
            SpeechRequest("Hi.", sampling=SamplingParams(max_tokens=2000, min_tokens=2000))
        )
        assert isinstance(await stream.get(), AudioChunk) and engine.ready

        def broken_step():
            raise RuntimeError("device lost")

        monkeypatch.setattr(engine.core, "step", broken_step)
        rest = [e async for e in stream]
        assert rest[-1].reason == FinishReason.FAILED and "device lost" in rest[-1].error
        assert not engine.ready
        with pytest.raises(EngineDead):
            await engine.submit(SpeechRequest("Hi."))
        with pytest.raises(EngineDead):
            await engine.prepare_turn(TurnFromText("Hello."))
    finally:
        await engine.shutdown()
