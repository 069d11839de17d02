"""`/v1/stream` TTS sessions with tiny-csm (Mimi audio, depth stage), with and without a voice
prompt from `--voices-dir`: real uvicorn, real engine, the `websockets` client."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from gateway_testkit import collect_response, expect_close, send, start_session

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from gateway.synth import write_wav

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 6}  # 6 frames: 480 ms of audio per request
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    """One reference clip as a user would drop it in: a 16 kHz WAV and its transcript."""
    folder = tmp_path_factory.mktemp("voices")
    clip = 0.2 * np.random.default_rng(1).standard_normal(8000)
    write_wav(folder / "narrator.wav", clip, 16000)
    (folder / "narrator.txt").write_text("[1] This is how I sound.\n")
    return folder


@pytest.fixture(scope="module")
def csm_engine(voices_dir):
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine(
        "tiny-csm",
        config=EngineConfig(kv_cache_mb=64, realtime_admission=False),
        voices_dir=str(voices_dir),
    )
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def csm_server(csm_engine, voices_dir):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-csm", voices_dir=str(voices_dir)), csm_engine)
    yield server
    server.stop()


async def engine_pcm(engine, voice: str) -> np.ndarray:
    params = SamplingParams(**{**engine.facts.sampling_defaults, **SAMPLING})
    stream = await engine.submit(SpeechRequest(TEXT, voice, params))
    return np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)])


async def speak(url: str, voice: str | None) -> tuple[dict, np.ndarray, dict]:
    async with websockets.connect(url) as ws:
        fields = {"voice": voice} if voice else {}
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24, **fields)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    pcm = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    return started, pcm, played.done


async def test_csm_session_streams_the_engine_audio(csm_server, csm_engine):
    started, got, done = await speak(csm_server.url, None)
    assert started["model"] == "tiny-csm"
    assert done["status"] == "length"  # random weights never emit the end frame
    assert done["audio_ms"] == 480  # 6 frames of 80 ms, 24 frames of 20 ms
    want = np.clip(await engine_pcm(csm_engine, "0"), -1, 1)
    assert len(want) == 6 * 1920
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # int16 rounding apart


async def test_voice_prompt_from_the_voices_dir(csm_server, csm_engine):
    assert "narrator" in csm_engine.facts.voices
    _, voiced, done = await speak(csm_server.url, "narrator")
    assert done["status"] == "length" and done["audio_ms"] == 480
    want = np.clip(await engine_pcm(csm_engine, "narrator"), -1, 1)
    assert np.max(np.abs(voiced[: len(want)] - want)) <= 1.5 / 32768
    _, plain, _ = await speak(csm_server.url, "1")  # the clip's speaker, without its context
    assert np.abs(voiced - plain).max() > 0.01  # the reference turn changes the speech


async def test_unknown_voice_is_refused_with_the_choices(csm_server):
    async with websockets.connect(csm_server.url) as ws:
        await send(ws, type="session.start", voice="nobody")
        code, messages = await expect_close(ws)
    assert code == 1007
    assert messages[0]["code"] == "bad_field" and "0, 1, narrator" in messages[0]["message"]
