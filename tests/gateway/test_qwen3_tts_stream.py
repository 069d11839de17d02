"""A `/v1/stream` TTS session with tiny-qwen3-tts (talker, code predictor depth stage, 12 Hz
decoder): real uvicorn, real engine, the `websockets` client; the session's audio equals the
engine's own, and a speaker the checkpoint lacks is refused with the ones it has."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from gateway_testkit import collect_response, recv_json, send, start_session

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 6, "min_tokens": 6}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def q3_engine(tmp_path_factory):
    from engine.config import EngineConfig
    from engine.factory import build_engine

    mp = pytest.MonkeyPatch()
    mp.setenv("VOXGATE_CACHE", str(tmp_path_factory.mktemp("cache")))
    eng = build_engine(
        "tiny-qwen3-tts", config=EngineConfig(kv_cache_mb=64, realtime_admission=False)
    )
    yield eng
    asyncio.run(eng.shutdown())
    mp.undo()


@pytest.fixture(scope="module")
def q3_server(q3_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-qwen3-tts"), q3_engine)
    yield server
    server.stop()


async def test_qwen3_tts_session_streams_the_engine_audio(q3_server, q3_engine):
    async with websockets.connect(q3_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24, voice="vivian")
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-qwen3-tts"
    assert started["token_rate_hz"] == q3_engine.facts.token_rate_hz == 12.5
    assert played.done["status"] == "length"
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**q3_engine.facts.sampling_defaults, **SAMPLING})
    stream = await q3_engine.submit(SpeechRequest(TEXT, "vivian", params))
    want = np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)])
    assert len(want) == 6 * 1920  # six 80 ms frames at 24 kHz
    assert played.done["audio_ms"] == len(want) // 24
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # s16 rounding apart


async def test_unknown_speaker_is_refused_with_the_speakers_it_has(q3_server):
    async with websockets.connect(q3_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice="nobody")
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["fatal"]
    assert "ryan" in reply["message"]
