"""A `/v1/stream` TTS session with tiny-cosyvoice2 (Qwen2 LM, flow + HiFT audio): real uvicorn,
real engine, the `websockets` client; the session's audio equals the engine's own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from gateway_testkit import collect_response, send, start_session

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 30, "min_tokens": 30}  # 1.2 s: one chunk + flush
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def cv_engine():
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine("tiny-cosyvoice2", config=EngineConfig(kv_cache_mb=64))
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def cv_server(cv_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-cosyvoice2"), cv_engine)
    yield server
    server.stop()


async def test_cosyvoice2_session_streams_the_engine_audio(cv_server, cv_engine):
    async with websockets.connect(cv_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24, voice="guide")
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-cosyvoice2"
    assert played.done["status"] == "length"
    assert played.done["audio_ms"] == 1200  # 30 tokens x 2 mel frames x 20 ms
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**cv_engine.facts.sampling_defaults, **SAMPLING})
    stream = await cv_engine.submit(SpeechRequest(TEXT, "guide", params))
    want = np.clip(
        np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)]), -1, 1
    )
    assert len(want) == 30 * 2 * 480
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # s16 rounding apart
