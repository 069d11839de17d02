"""A `/v1/stream` TTS session with tiny-zonos-hybrid (Zonos' Mamba2 + attention backbone, each
request's recurrent state in the model's pool): real uvicorn, real engine, the `websockets`
client. The session's 24 kHz audio is the engine's own 44.1 kHz, resampled by the gateway; a
response cancelled mid-stream (barge-in) gives its recurrent state back with its KV."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets
from gateway_testkit import (
    collect_response,
    engine_pcm,
    resample,
    send,
    start_session,
    wait_engine_idle,
)

from models.zonos.phonemes import espeak_available

pytestmark = pytest.mark.skipif(
    not espeak_available(),
    reason="Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`",
)
TEXT = "Hello from the hybrid."
SAMPLING = {"temperature": 0.0, "max_tokens": 20, "min_tokens": 20}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def hybrid_engine():
    from engine.config import EngineConfig
    from engine.factory import build_engine

    # The session's preset cache (tests/conftest.py): written once for these tests and
    # tests/models/test_zonos_hybrid.py. Real-time admission off, as in the gateway's other
    # engines (conftest.py).
    config = EngineConfig(kv_cache_mb=32, realtime_admission=False)
    eng = build_engine("tiny-zonos-hybrid", config=config)
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def hybrid_server(hybrid_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-zonos-hybrid"), hybrid_engine)
    yield server
    server.stop()


async def test_hybrid_session_streams_the_engine_audio_at_the_wire_rate(
    hybrid_server, hybrid_engine
):
    async with websockets.connect(hybrid_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-zonos-hybrid"
    assert played.done["status"] == "length"
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    native = np.clip(await engine_pcm(hybrid_engine, TEXT, SAMPLING), -1, 1)
    assert len(native) == (20 - 8) * 512  # the first 8 grid frames only complete the delay
    want = resample(native, 44100, 24000)
    n = min(len(got), len(want))
    assert n >= len(native) * 24000 // 44100 - 64
    assert np.max(np.abs(got[:n] - want[:n])) <= 2 / 32768
    await wait_engine_idle(hybrid_engine)
    assert hybrid_engine.core.model.recurrent_state.live == 0


async def test_a_cancelled_response_frees_its_recurrent_state(hybrid_server, hybrid_engine):
    pool = hybrid_engine.core.model.recurrent_state
    long = {**SAMPLING, "max_tokens": 400, "min_tokens": 400}
    async with websockets.connect(hybrid_server.url) as ws:
        await start_session(ws, sampling=long, output_audio=PCM24)
        await send(ws, type="text", text=TEXT)
        # Until the first audio: the request is decoding, its state live.
        while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
            pass
        assert pool.live == 1
        await send(ws, type="response.cancel")
        while True:  # audio already sent may come before the answer
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, str) and json.loads(message)["type"] == "response.done":
                break
        assert json.loads(message)["status"] == "cancelled"
    await wait_engine_idle(hybrid_engine)
    assert pool.live == 0
