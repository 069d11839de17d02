"""A `/v1/stream` TTS session with tiny-chatterbox (T3 with CFG, S3Gen): real uvicorn, real
engine, the `websockets` client; the session's audio equals the engine's own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from gateway_testkit import collect_response, recv_json, send, start_session

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 20, "min_tokens": 20}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def cb_engine(tmp_path_factory):
    from engine.config import EngineConfig
    from engine.factory import build_engine

    mp = pytest.MonkeyPatch()
    mp.setenv("VOXGATE_CACHE", str(tmp_path_factory.mktemp("cache")))
    eng = build_engine("tiny-chatterbox", config=EngineConfig(kv_cache_mb=64))
    yield eng
    asyncio.run(eng.shutdown())
    mp.undo()


@pytest.fixture(scope="module")
def cb_server(cb_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-chatterbox"), cb_engine)
    yield server
    server.stop()


async def test_chatterbox_session_streams_the_engine_audio(cb_server, cb_engine):
    async with websockets.connect(cb_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-chatterbox"
    assert started["token_rate_hz"] == cb_engine.facts.token_rate_hz == 25
    assert played.done["status"] == "length"
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**cb_engine.facts.sampling_defaults, **SAMPLING})
    stream = await cb_engine.submit(SpeechRequest(TEXT, None, params))
    want = np.clip(
        np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)]), -1, 1
    )
    # 20 tokens, less any of the head's non-code rows, 2 mel frames of 480 samples each.
    assert 0 < len(want) <= 20 * 2 * 480 and len(want) % 960 == 0
    assert played.done["audio_ms"] == len(want) // 24
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # s16 rounding apart


async def test_unknown_voice_is_refused_with_the_voices_it_has(cb_server):
    async with websockets.connect(cb_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice="nobody")
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["fatal"]
    assert "default" in reply["message"]
