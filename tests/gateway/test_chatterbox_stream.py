"""A `/v1/stream` TTS session with tiny-chatterbox (T3 with CFG, S3Gen): real uvicorn, real
engine, the `websockets` client; the session's audio equals the engine's own. A voice a client
adds from a clip (POST /v1/voices) is conditioned as the same clip in --voices-dir is."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import wave

import httpx
import numpy as np
import pytest
import torch
import websockets
from clip_files import b64, noise, wav_bytes
from gateway_testkit import collect_response, recv_json, send, start_session

from engine.outputs import AudioChunk, Finished, SpeechRequest
from engine.request import SamplingParams

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 20, "min_tokens": 20}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    """One reference clip as a user would drop it in: a 2 s 16 kHz WAV (Chatterbox needs no
    transcript)."""
    folder = tmp_path_factory.mktemp("voices")
    t = np.arange(32000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 160 * t * (1 + 0.2 * np.sin(2 * np.pi * 2 * t)))
    clip = ((tone + 0.02 * np.random.default_rng(1).standard_normal(t.size)) * 32767).astype("<i2")
    with wave.open(str(folder / "narrator.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(clip.tobytes())
    return folder


@pytest.fixture(scope="module")
def cb_engine(tmp_path_factory, voices_dir):
    from engine.config import EngineConfig
    from engine.factory import build_engine

    mp = pytest.MonkeyPatch()
    mp.setenv("VOXGATE_CACHE", str(tmp_path_factory.mktemp("cache")))
    # Real-time admission off, as in the gateway's other engines (conftest.py): its
    # calibration bursts at start-up took ~7 s of CPU here.
    config = EngineConfig(kv_cache_mb=64, realtime_admission=False)
    eng = build_engine("tiny-chatterbox", config=config, voices_dir=str(voices_dir))
    yield eng
    asyncio.run(eng.shutdown())
    mp.undo()


@pytest.fixture(scope="module")
def cb_server(cb_engine, voices_dir):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    settings = GatewaySettings(model="tiny-chatterbox", voices_dir=str(voices_dir))
    server = start_server(settings, cb_engine)
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
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # int16 rounding apart


async def test_unknown_voice_is_refused_with_the_voices_it_has(cb_server):
    async with websockets.connect(cb_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice="nobody")
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["fatal"]
    assert "default" in reply["message"] and "narrator" in reply["message"]


async def _engine_pcm(engine, text: str, model_options: dict) -> np.ndarray:
    params = SamplingParams(**{**engine.facts.sampling_defaults, **SAMPLING})
    stream = await engine.submit(SpeechRequest(text, None, params, model_options=model_options))
    return np.clip(
        np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)]), -1, 1
    )


async def test_model_options_are_announced_checked_and_carried(cb_server, cb_engine, monkeypatch):
    """session.started lists Chatterbox's options; a bad one gets a non-fatal bad_field naming
    it and its range (the session goes on); a response's own options, over the session's,
    reach the engine with its request, and its audio is the engine's for those options. (The
    tiny preset's random T3 happens to say the same tokens whatever the options: the official
    T3's tokens per option are compared in tests/models/test_chatterbox_t3.py.)"""
    session_options = {"exaggeration": 1.2}
    response_options = {"cfg_weight": 0.0}
    submitted = []
    submit = cb_engine.submit

    async def recording_submit(request):
        submitted.append(request)
        return await submit(request)

    monkeypatch.setattr(cb_engine, "submit", recording_submit)
    async with websockets.connect(cb_server.url) as ws:
        started = await start_session(
            ws, sampling=SAMPLING, output_audio=PCM24, model_options=session_options
        )
        announced = {o["name"]: o for o in started["model_options"]}
        await send(ws, type="text", text=TEXT, model_options={"cfg_weight": 3})
        too_big = await recv_json(ws)
        await send(ws, type="text", text=TEXT, model_options={"speed": 1.0})
        unknown = await recv_json(ws)
        await send(ws, type="text", text=TEXT, model_options=response_options)
        played = await collect_response(ws)
    monkeypatch.undo()
    assert [r.model_options for r in submitted] == [{"exaggeration": 1.2, "cfg_weight": 0.0}]
    assert announced["exaggeration"]["default"] == announced["cfg_weight"]["default"] == 0.5
    assert (announced["cfg_weight"]["minimum"], announced["cfg_weight"]["maximum"]) == (0, 1)
    assert too_big["type"] == "error" and too_big["code"] == "bad_field" and not too_big["fatal"]
    assert "cfg_weight" in too_big["message"] and "[0.0, 1.0]" in too_big["message"]
    assert unknown["code"] == "bad_field" and not unknown["fatal"]
    assert "'speed'" in unknown["message"] and "exaggeration, cfg_weight" in unknown["message"]
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    want = await _engine_pcm(cb_engine, TEXT, {**session_options, **response_options})
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768


async def test_a_bad_model_option_at_session_start_names_it(cb_server):
    async with websockets.connect(cb_server.url) as ws:
        await send(ws, type="session.start", model_options={"exaggeration": 9})
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["code"] == "bad_field"
    assert "exaggeration" in reply["message"] and "[0.0, 2.0]" in reply["message"]


async def session_audio(url: str, voice: str | None) -> np.ndarray:
    async with websockets.connect(url) as ws:
        chosen = {"voice": voice} if voice else {}
        await start_session(ws, sampling=SAMPLING, output_audio=PCM24, **chosen)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert played.done["status"] == "length"
    return np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768


async def engine_tokens(engine, voice: str | None) -> tuple:
    params = SamplingParams(**{**engine.facts.sampling_defaults, **SAMPLING})
    stream = await engine.submit(SpeechRequest(TEXT, voice, params))
    [finished] = [e async for e in stream if isinstance(e, Finished)]
    return finished.output_ids


async def test_a_clip_in_the_voices_dir_is_a_listed_voice_that_speaks(
    cb_server, cb_engine, monkeypatch
):
    """The clip becomes a voice (voice encoder, S3 tokenizer, CAM++): GET /v1/voices lists it
    as from the voices dir, a session in it speaks, its requests reach the engine in that
    voice, whose T3 conditioning makes other tokens than the default voice's, and it sounds
    other than the default voice."""
    async with httpx.AsyncClient() as client:
        listed = (await client.get(f"{cb_server.http}/v1/voices", timeout=10)).json()
    assert listed["cloning"] is True
    assert {"name": "narrator", "source": "voices_dir"} in listed["voices"]
    assert {"name": "default", "source": "preset"} in listed["voices"]
    submitted = []
    submit = cb_engine.submit

    async def recording_submit(request):
        submitted.append(request.voice)
        return await submit(request)

    monkeypatch.setattr(cb_engine, "submit", recording_submit)
    voiced = await session_audio(cb_server.url, "narrator")
    plain = await session_audio(cb_server.url, None)
    assert len(voiced) > 0 and np.abs(voiced).max() > 1e-3
    n = min(len(voiced), len(plain))
    rms = np.sqrt(np.mean(plain**2))
    assert np.sqrt(np.mean((voiced[:n] - plain[:n]) ** 2)) > 0.1 * rms
    assert submitted[0] == "narrator" and submitted[-1] in (None, "default")
    monkeypatch.undo()
    assert await engine_tokens(cb_engine, "narrator") != await engine_tokens(cb_engine, None)


async def test_a_clients_voice_is_conditioned_as_the_voices_dir_clip(
    cb_server, cb_engine, voices_dir, monkeypatch
):
    """POST /v1/voices with the narrator's clip: encoded beside the engine loop, its
    conditioning rows written on the engine thread into a slot of the table the decode step
    reads; the rows a request in it reads and its S3Gen prompt equal what --voices-dir made
    of the same file, so a session in it speaks exactly as `narrator`. DELETE frees the slot
    and the voice is refused afterwards."""
    import threading

    model = cb_engine.core.model
    writers: list[str] = []
    write = model._write_slot

    def recording_write(slot, rows):
        writers.append(threading.current_thread().name)
        return write(slot, rows)

    monkeypatch.setattr(model, "_write_slot", recording_write)
    table = model._bank.data_ptr()
    clip = (voices_dir / "narrator.wav").read_bytes()
    async with httpx.AsyncClient(base_url=cb_server.http, timeout=60) as client:
        response = await client.post("/v1/voices", json={"audio": b64(clip), "name": "me"})
        assert response.status_code == 201, response.text
        voice = response.json()["name"]
        assert response.json()["seconds"] == 2.0
        listed = (await client.get("/v1/voices")).json()["voices"]
    assert {"name": voice, "source": "client", "label": "me", "seconds": 2.0} in listed
    assert writers == ["voxgate-engine"]  # the table changes on the engine's own thread
    assert model._bank.data_ptr() == table  # in place: captured graphs read it where it is

    mine, narrator = model.preprocess(TEXT, voice), model.preprocess(TEXT, "narrator")
    # The prompts differ only in the slot their conditioning rows name.
    cond = model._cond_rows - 1
    slots = [{row[0] - model.ids.cond_base for row in p.token_ids[:cond]} for p in (mine, narrator)]
    assert len(slots[0]) == len(slots[1]) == 1 and slots[0] != slots[1]
    assert [row[1] for row in mine.token_ids[:cond]] == list(range(cond))
    assert mine.token_ids[cond:] == narrator.token_ids[cond:]
    slot, narrator_slot = slots[0].pop(), slots[1].pop()
    assert torch.equal(model._bank[slot], model._bank[narrator_slot])
    made, listed_voice = mine.extras["voice"], narrator.extras["voice"]
    for a, b in ((made.t3, listed_voice.t3), (made.s3gen, listed_voice.s3gen)):
        for field in dataclasses.fields(a):
            want, got = getattr(b, field.name), getattr(a, field.name)
            assert torch.equal(got, want) if torch.is_tensor(want) else got == want, field.name
    spoken = await session_audio(cb_server.url, voice)
    assert np.array_equal(spoken, await session_audio(cb_server.url, "narrator"))

    async with httpx.AsyncClient(base_url=cb_server.http, timeout=60) as client:
        assert (await client.delete(f"/v1/voices/{voice}")).status_code == 204
    # The engine thread frees the slot when it next takes its commands.
    deadline = time.monotonic() + 5
    while slot not in model._free_slots:
        assert time.monotonic() < deadline, "the deleted voice's slot was not freed"
        await asyncio.sleep(0.01)
    async with websockets.connect(cb_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice=voice)
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["code"] == "bad_field"


@pytest.mark.parametrize(("seconds", "check"), [(31.0, "clip_too_long"), (1.5, "clip_too_short")])
def test_clips_outside_chatterbox_rules_are_refused(cb_server, seconds, check):
    """Chatterbox takes 2 to 30 s (its speech tokenizer's most), with no transcript."""
    body = {"audio": b64(wav_bytes(noise(seconds, 16000), 16000))}
    response = httpx.post(f"{cb_server.http}/v1/voices", json=body, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["code"] == check


async def test_a_voice_clip_in_session_start_speaks_as_the_voices_dir_clip(cb_server, voices_dir):
    """session.start's voice_clip makes the session's voice from the clip (the same checks and
    encoding as POST /v1/voices): session.started names it, and the session speaks exactly
    as `narrator`."""
    clip = (voices_dir / "narrator.wav").read_bytes()
    async with websockets.connect(cb_server.url) as ws:
        started = await start_session(
            ws, sampling=SAMPLING, output_audio=PCM24, voice_clip={"audio": b64(clip)}
        )
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["voice"].startswith("clip-")
    spoken = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    assert np.array_equal(spoken, await session_audio(cb_server.url, "narrator"))
    async with httpx.AsyncClient(base_url=cb_server.http, timeout=30) as client:
        assert (await client.delete(f"/v1/voices/{started['voice']}")).status_code == 204
