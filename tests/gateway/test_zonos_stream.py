"""A `/v1/stream` TTS session with tiny-zonos (eSpeak phonemes, CFG, 9 DAC codebooks with the
delay pattern): real uvicorn, real engine, the `websockets` client. The model speaks at
44.1 kHz; the session's 24 kHz audio is the engine's own, resampled by the gateway. A voice a
client adds from a clip (POST /v1/voices, no transcript) speaks as the same clip in
--voices-dir does (the engine serves `narrator`, made from it)."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import websockets
from clip_files import VOICE_CLIP, b64, noise, wav_bytes
from gateway_testkit import (
    collect_response,
    engine_pcm,
    expect_close,
    recv_json,
    resample,
    send,
    start_session,
)

from models.zonos.phonemes import espeak_available

pytestmark = pytest.mark.skipif(
    not espeak_available(),
    reason="Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`",
)
TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 24, "min_tokens": 24}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def zonos_engine(tmp_path_factory):
    from engine.config import EngineConfig
    from engine.factory import build_engine

    mp = pytest.MonkeyPatch()
    mp.setenv("VOXGATE_CACHE", str(tmp_path_factory.mktemp("cache")))
    voices = tmp_path_factory.mktemp("voices")
    (voices / "narrator.wav").write_bytes(VOICE_CLIP)
    # Real-time admission off, as in the gateway's other engines (conftest.py).
    config = EngineConfig(kv_cache_mb=32, realtime_admission=False)
    eng = build_engine("tiny-zonos", config=config, voices_dir=str(voices))
    yield eng
    asyncio.run(eng.shutdown())
    mp.undo()


@pytest.fixture(scope="module")
def zonos_server(zonos_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-zonos"), zonos_engine)
    yield server
    server.stop()


async def test_zonos_session_streams_the_engine_audio_at_the_wire_rate(zonos_server, zonos_engine):
    async with websockets.connect(zonos_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-zonos"
    assert started["token_rate_hz"] == pytest.approx(44100 / 512)
    assert played.done["status"] == "length"
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    native = np.clip(await engine_pcm(zonos_engine, TEXT, SAMPLING), -1, 1)
    # 24 frames of the delayed grid: the first 8 only complete the delay, 16 audio frames.
    assert len(native) == (24 - 8) * 512
    want = resample(native, 44100, 24000)
    n = min(len(got), len(want))
    assert n >= len(native) * 24000 // 44100 - 64
    assert np.max(np.abs(got[:n] - want[:n])) <= 2 / 32768


async def test_unknown_voice_is_refused_with_the_voices_it_has(zonos_server):
    async with websockets.connect(zonos_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice="nobody")
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["fatal"]
    assert "default" in reply["message"]


async def speak(server, voice: str) -> np.ndarray:
    async with websockets.connect(server.url) as ws:
        await start_session(ws, sampling=SAMPLING, output_audio=PCM24, voice=voice)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert played.done["status"] == "length"
    return np.frombuffer(b"".join(played.frames), dtype="<i2")


async def test_a_voice_from_a_clip_speaks_as_the_voices_dir_clip(zonos_server, zonos_engine):
    server, model = zonos_server, zonos_engine.core.model
    listed = httpx.get(f"{server.http}/v1/voices", timeout=10).json()
    assert listed["cloning"] and {"name": "narrator", "source": "voices_dir"} in listed["voices"]
    response = httpx.post(f"{server.http}/v1/voices", json={"audio": b64(VOICE_CLIP)}, timeout=60)
    assert response.status_code == 201, response.text
    voice = response.json()["name"]
    mine, narrator = await speak(server, voice), await speak(server, "narrator")
    # The same embedding: the same grid, decoded alike (1 LSB of codec rounding).
    assert mine.shape == narrator.shape
    assert int(np.abs(mine.astype(int) - narrator.astype(int)).max()) <= 2
    # The tiny model's greedy grid hardly depends on the speaker: its prompt says which it is.
    prompt = model.preprocess(TEXT, voice).token_ids
    assert prompt == model.preprocess(TEXT, "narrator").token_ids
    assert prompt != model.preprocess(TEXT, "default").token_ids
    deleted = httpx.delete(f"{server.http}/v1/voices/{voice}", timeout=10)
    assert deleted.status_code == 204
    async with websockets.connect(server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice=voice)
        _, messages = await expect_close(ws)
    assert messages and messages[0]["code"] == "bad_field"


@pytest.mark.parametrize(
    ("audio", "check"),
    [
        (wav_bytes(noise(31.0, 16000), 16000), "clip_too_long"),  # Zonos takes up to 30 s
        (wav_bytes(noise(1.5, 16000), 16000), "clip_too_short"),
    ],
)
def test_clips_outside_zonos_rules_are_refused(zonos_server, audio, check):
    body = {"audio": b64(audio)}
    response = httpx.post(f"{zonos_server.http}/v1/voices", json=body, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["code"] == check


async def test_language_is_a_text_option_and_japanese_is_refused_up_front(
    zonos_server, zonos_engine, monkeypatch
):
    """session.started lists `language` with Zonos' eSpeak codes less `ja`, default en-us; a
    request for Japanese is refused at session.start with the reason, before anything is
    queued; a response's language reaches the engine with its request, beside the numbers."""
    submitted = []
    submit = zonos_engine.submit

    async def recording_submit(request):
        submitted.append(request)
        return await submit(request)

    monkeypatch.setattr(zonos_engine, "submit", recording_submit)
    async with websockets.connect(zonos_server.url) as ws:
        await send(ws, type="session.start", model_options={"language": "ja"})
        japanese = await recv_json(ws)
    short = {"temperature": 0.0, "max_tokens": 10, "min_tokens": 10}
    async with websockets.connect(zonos_server.url) as ws:
        started = await start_session(
            ws, sampling=short, output_audio=PCM24, model_options={"pitch_std": 60}
        )
        await send(ws, type="text", text="Guten Tag.", model_options={"language": "DE"})
        played = await collect_response(ws)
    monkeypatch.undo()
    assert japanese["type"] == "error" and japanese["code"] == "bad_field" and japanese["fatal"]
    assert "model_options.language" in japanese["message"] and "Sudachi" in japanese["message"]
    language = next(o for o in started["model_options"] if o["name"] == "language")
    assert language["kind"] == "text" and language["default"] == "en-us"
    assert "ja" not in language["choices"] and {"en-us", "de", "fr-fr"} <= set(language["choices"])
    assert played.done["status"] == "length"
    assert [r.model_options for r in submitted] == [{"pitch_std": 60.0, "language": "de"}]
