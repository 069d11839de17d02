"""The engine in a process of its own: same results and the same contract as the thread one."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch

from engine.api import TurnFromText, VoiceClip
from engine.config import EngineConfig
from engine.factory import build_engine
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError

SEEDED = SpeechRequest(
    "Hello there.", sampling=SamplingParams(seed=3, max_tokens=42, min_tokens=42)
)


async def collect(engine, request: SpeechRequest) -> tuple[np.ndarray, Finished]:
    stream = await engine.submit(request)
    events = [e async for e in stream]
    audio = np.concatenate([e.pcm for e in events if isinstance(e, AudioChunk)])
    return audio, events[-1]


async def test_process_engine_matches_the_thread_engine():
    # Real-time admission off in both: its calibration bursts at start-up (seconds of CPU)
    # are no part of the comparison.
    config = EngineConfig(num_kv_blocks=256, realtime_admission=False)
    threaded = build_engine("tiny-orpheus", config=config)
    try:
        want, _ = await collect(threaded, SEEDED)
    finally:
        await threaded.shutdown()
    engine = build_engine("tiny-orpheus", config=replace(config, engine_process=True))
    try:
        assert engine.ready and engine.facts.sample_rate == 24000
        got, finished = await collect(engine, SEEDED)
        assert finished.reason == FinishReason.LENGTH and finished.num_tokens == 42
        # The same tokens, so the same audio: SNAC's stateful decoder gives the whole decode
        # whatever the chunking (which the two engines' timing may change), to float rounding.
        assert len(got) == len(want)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

        with pytest.raises(ModelInputError, match="empty"):
            await engine.submit(SpeechRequest("   "))
        # Commands go through the same `apply` as in the thread engine: a bad one is refused
        # there too, and a turn command answers across the process boundary.
        engine.push_audio("nobody", np.zeros(160, np.float32))
        with pytest.raises(ModelInputError, match="not a turn-based model"):
            await engine.prepare_turn(TurnFromText("Hello."))
        clip = VoiceClip(np.zeros(16000, np.float32), 16000, "Hello.")
        with pytest.raises(ModelInputError, match="cannot make a voice from a clip"):
            await engine.add_clip_voice("clip-0", clip)  # tiny-orpheus cannot clone

        long = await engine.submit(SpeechRequest("Hi.", sampling=SamplingParams(max_tokens=3000)))
        assert isinstance(await long.get(), AudioChunk)
        engine.cancel(long.request_id)
        rest = [e async for e in long]
        assert rest[-1].reason == FinishReason.CANCELLED
        for _ in range(100):  # stats arrive every 50 ms
            if engine.stats().kv_blocks_used == 0:
                break
            await asyncio.sleep(0.05)
        assert engine.stats().kv_blocks_used == 0 and engine.stats().stepping
    finally:
        await engine.shutdown()
    assert not engine.ready


def test_engine_process_is_the_default_on_cuda_and_for_voxgate_tiny_on_the_cpu(tmp_path):
    from engine.factory import uses_engine_process

    assert not uses_engine_process(EngineConfig(device="cpu"))
    assert not uses_engine_process(EngineConfig(device="cpu"), "tiny-orpheus")
    assert uses_engine_process(EngineConfig(device="cpu"), "voxgate-tiny")
    assert not uses_engine_process(EngineConfig(device="cpu", engine_process=False), "voxgate-tiny")
    assert uses_engine_process(EngineConfig(device="cpu", engine_process=True))
    assert not uses_engine_process(EngineConfig(device="cuda", engine_process=False))
    # A checkpoint folder is recognised by its config; other folders are not.
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text('{"model_type": "voxgate_tiny"}')
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_type": "llama"}')
    assert uses_engine_process(EngineConfig(device="cpu"), str(tmp_path / "tiny"))
    assert not uses_engine_process(EngineConfig(device="cpu"), str(tmp_path / "other"))
    assert not uses_engine_process(EngineConfig(device="cpu"), str(tmp_path / "missing"))
    if torch.cuda.is_available():
        assert uses_engine_process(EngineConfig(device="cuda"))
        # Every model, turn-based speech-to-speech ones included (their turns are prepared
        # over the engine's contract, gateway/turns.py).
        assert uses_engine_process(EngineConfig(device="cuda"), "glm-4-voice-9b")
        assert not uses_engine_process(
            EngineConfig(device="cuda", engine_process=False), "glm-4-voice-9b"
        )


def test_serving_defaults_for_voxgate_tiny_on_the_cpu(monkeypatch):
    """voxgate-tiny on the CPU: engine process, int8, half the cores, real-time admission; what
    is set explicitly
    stays; other models keep torch's and the device's defaults."""
    from engine import factory

    monkeypatch.setattr(factory, "half_the_cores", lambda: 3)
    tiny = factory.serving_defaults(EngineConfig(device="cpu"), "voxgate-tiny")
    assert tiny.engine_process and tiny.cpu_int8 and tiny.realtime_admission
    assert tiny.cpu_threads == 3
    mine = factory.serving_defaults(
        EngineConfig(
            device="cpu",
            engine_process=False,
            cpu_int8=False,
            cpu_threads=2,
            realtime_admission=False,
        ),
        "voxgate-tiny",
    )
    assert not (mine.engine_process or mine.cpu_int8 or mine.realtime_admission)
    assert mine.cpu_threads == 2
    other = factory.serving_defaults(EngineConfig(device="cpu"), "tiny-orpheus")
    assert (other.engine_process, other.cpu_int8, other.cpu_threads) == (False, False, None)
    assert other.realtime_admission is True  # every model's default (EngineConfig)


async def test_a_full_duplex_session_in_the_engine_process():
    """The duplex loop behind the same process transport: a session fed frame by frame speaks
    a frame per frame, and ends `stop` when its user leaves."""
    engine = build_engine("tiny-moshi", config=EngineConfig(kv_cache_mb=64, engine_process=True))
    try:
        facts = engine.facts
        assert facts.full_duplex
        frame = int(round(facts.seconds_per_token * facts.sample_rate))
        stream = await engine.submit(SpeechRequest("", sampling=SamplingParams(max_tokens=500)))
        rng = np.random.default_rng(0)
        chunks = []
        for _ in range(4):
            engine.push_audio(stream.request_id, rng.normal(0, 0.1, frame).astype(np.float32))
            while True:
                event = await asyncio.wait_for(stream.get(), 30)
                if isinstance(event, AudioChunk):
                    chunks.append(event)
                    break
        assert all(len(c.pcm) == frame for c in chunks)
        engine.end_session(stream.request_id)
        rest = [e async for e in stream]
        assert rest[-1].reason == FinishReason.STOP
        for _ in range(100):  # stats arrive every 50 ms
            if engine.stats().kv_blocks_used == 0:
                break
            await asyncio.sleep(0.05)
        assert engine.stats().kv_blocks_used == 0 and engine.stats().running == 0
    finally:
        await engine.shutdown()


async def test_word_timings_cross_the_process_boundary():
    """voxgate-tiny times its words (engine/word_timing.py); the engine process sends the same
    WordTimings events as the thread engine, before its Finished."""
    from engine.outputs import WordTimings
    from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

    if not (SHIPPED_WEIGHTS / "config.json").exists():
        pytest.skip("voxgate-tiny weights not shipped (training/README.md)")
    request = SpeechRequest(
        "Call me back tonight.", sampling=SamplingParams(seed=5), word_timings=True
    )
    got = {}
    for in_process in (False, True):
        engine = build_engine(
            "voxgate-tiny", config=EngineConfig(engine_process=in_process, realtime_admission=False)
        )
        try:
            events = [e async for e in await engine.submit(request)]
        finally:
            await engine.shutdown()
        assert isinstance(events[-1], Finished) and events[-1].reason == FinishReason.STOP
        got[in_process] = [w for e in events if isinstance(e, WordTimings) for w in e.words]
    assert [w.text for w in got[True]] == ["call", "me", "back", "tonight"]
    assert got[True] == got[False]


def test_stats_keep_the_realtime_verdict_and_refusals_across_the_process_boundary():
    """A stats snapshot crosses as a pickle (the host's queue, or Ray) and the caller's side
    rebuilds it with its own `stepping`: the real-time verdict's cause and the refusals by cause
    survive both (the gateway counts a session refused at start under that cause)."""
    import pickle

    from engine.engine_host import HostedClient
    from engine.outputs import AdmissionStats, EngineStats, StepTiming

    class Caller(HostedClient):
        ready = True

    sent = EngineStats(
        2,
        0,
        100,
        10,
        7,
        StepTiming(),
        True,
        realtime_refusal="listeners",
        admission=AdmissionStats(streams=2, refusals={"listeners": 3, "kv": 1}),
    )
    caller = Caller()
    assert caller.stats().realtime_room  # nothing heard yet: no refusal made up
    caller._handle(pickle.loads(pickle.dumps(sent)))
    got = caller.stats()
    assert got.stepping and got.realtime_refusal == "listeners" and not got.realtime_room
    assert got.admission.refusals == {"listeners": 3, "kv": 1}


def test_an_engine_process_that_dies_while_loading_fails_its_start_at_once():
    """A child killed while it loads the model (the OOM killer, an operator) fails start() at
    once, naming the signal, instead of leaving it waiting out the start deadline."""
    import os
    import signal
    import threading
    import time

    from engine.process_engine import EngineSpec, ProcessEngine

    engine = ProcessEngine(EngineSpec("tiny-orpheus", None, EngineConfig(num_kv_blocks=256)))
    assert engine.start_timeout_s == 600.0  # EngineConfig.engine_start_timeout_s
    failed: list[BaseException] = []

    def start() -> None:
        try:
            engine.start()
        except RuntimeError as exc:
            failed.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    while engine._process.pid is None:
        time.sleep(0.01)
    time.sleep(0.3)  # spawned, loading
    os.kill(engine._process.pid, signal.SIGKILL)
    killed = time.monotonic()
    starting.join(30)
    assert not starting.is_alive() and time.monotonic() - killed < 3.0
    (error,) = failed
    assert "was killed by SIGKILL (signal 9" in str(error) and "while loading" in str(error)


def test_an_engine_process_exit_names_its_status_or_signal():
    from engine.process_engine import describe_exit

    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9).startswith("was killed by SIGKILL (signal 9; the kernel's OOM")
    assert describe_exit(-11) == "was killed by SIGSEGV (signal 11)"
    assert describe_exit(-200) == "was killed by signal 200"
