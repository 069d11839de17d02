"""A `/v1/stream` TTS session with tiny-qwen3-tts (talker, code predictor depth stage, 12 Hz
decoder): real uvicorn, real engine, the `websockets` client; the session's audio equals the
engine's own, and a speaker the checkpoint lacks is refused with the ones it has."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets
from gateway_testkit import Played, collect_response, recv_json, send, start_session

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
    # int16 rounding apart, and float rounding between the two runs of the engine: about one
    # run in four on the 2-core VM, the decoder's output differed by up to 1.8 int16 steps (its
    # chunks are cut by timing, when tokens and the codec are ready). 4 steps allowed; a gateway
    # that altered the audio would be far off.
    assert np.max(np.abs(got[: len(want)] - want)) <= 4 / 32768


async def test_unknown_speaker_is_refused_with_the_speakers_it_has(q3_server):
    async with websockets.connect(q3_server.url) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice="nobody")
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["fatal"]
    assert "ryan" in reply["message"]


async def test_language_and_instruction_are_announced_checked_and_carried(
    q3_server, q3_engine, monkeypatch
):
    """session.started lists the text options with the checkpoint's languages; a language it
    lacks gets a non-fatal bad_field naming the ones it has, an over-long instruction one
    naming the limit; a response's language and instruction, over the session's, reach the
    engine with its request (the language spelt as the model lists it), and its audio is the
    engine's for those options."""
    session_options = {"language": "English"}
    response_options = {"instruction": "Speak slowly, almost whispering."}
    submitted = []
    submit = q3_engine.submit

    async def recording_submit(request):
        submitted.append(request)
        return await submit(request)

    monkeypatch.setattr(q3_engine, "submit", recording_submit)
    async with websockets.connect(q3_server.url) as ws:
        started = await start_session(
            ws, sampling=SAMPLING, output_audio=PCM24, voice="ryan", model_options=session_options
        )
        await send(ws, type="text", text=TEXT, model_options={"language": "klingon"})
        bad_language = await recv_json(ws)
        await send(ws, type="text", text=TEXT, model_options={"instruction": "x" * 1001})
        too_long = await recv_json(ws)
        await send(ws, type="text", text=TEXT, model_options=response_options)
        played = await collect_response(ws)
    monkeypatch.undo()
    announced = {o["name"]: o for o in started["model_options"]}
    assert announced["language"] == {
        "name": "language",
        "kind": "text",
        "default": "auto",
        "choices": ["auto", "chinese", "english", "french"],
        "help": announced["language"]["help"],
    }
    assert announced["instruction"]["kind"] == "text"
    assert announced["instruction"]["max_chars"] == 1000
    assert bad_language["code"] == "bad_field" and not bad_language["fatal"]
    assert (
        "model_options.language must be one of auto, chinese, english, french"
        in (bad_language["message"])
    )
    assert "'klingon'" in bad_language["message"]
    assert too_long["code"] == "bad_field" and "limited to 1000 characters" in too_long["message"]
    want_options = {"language": "english", **response_options}
    assert [r.model_options for r in submitted] == [want_options]
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**q3_engine.facts.sampling_defaults, **SAMPLING})
    request = SpeechRequest(TEXT, "ryan", params, model_options=want_options)
    want = np.concatenate([e.pcm async for e in await q3_engine.submit(request) if _audio(e)])
    plain = SpeechRequest(TEXT, "ryan", params, model_options={"language": "english"})
    without = np.concatenate([e.pcm async for e in await q3_engine.submit(plain) if _audio(e)])
    assert len(want) == 6 * 1920 and played.done["audio_ms"] == len(want) // 24
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768
    assert np.max(np.abs(want - without)) > 1e-3  # the instruction is in the prompt


async def test_a_bad_language_at_session_start_names_the_languages(q3_server):
    async with websockets.connect(q3_server.url) as ws:
        await send(ws, type="session.start", model_options={"language": 7})
        reply = await recv_json(ws)
    assert reply["type"] == "error" and reply["code"] == "bad_field" and reply["fatal"]
    assert "model_options.language must be text (one of auto, chinese" in reply["message"]


def test_the_speech_endpoint_takes_text_options_and_refuses_bad_ones(q3_server):
    import httpx

    body = {"model": "tiny-qwen3-tts", "input": TEXT, "voice": "ryan", "response_format": "pcm"}
    bad = httpx.post(
        f"{q3_server.http}/v1/audio/speech",
        json={**body, "model_options": {"language": "german"}},
        timeout=30,
    )
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["param"] == "model_options.language" and "english" in error["message"]
    good = httpx.post(
        f"{q3_server.http}/v1/audio/speech",
        json={**body, "max_tokens": 4, "model_options": {"language": "French"}},
        timeout=30,
    )
    assert good.status_code == 200 and len(good.content) == 4 * 1920 * 2


def _audio(event) -> bool:
    return isinstance(event, AudioChunk)


STREAMED = ["Hello fr", "om the ", "gateway, in pieces."]
STREAM_SAMPLING = {"temperature": 0.0, "max_tokens": 48}


async def _first_audio(ws) -> tuple[dict, bytes]:
    """response.started, then the response's first audio frame."""
    started = await recv_json(ws)
    assert started["type"] == "response.started", started
    while not isinstance(message := await asyncio.wait_for(ws.recv(), 30), bytes):
        raise AssertionError(f"an event before the first audio: {message}")
    return started, message


async def test_streamed_text_is_one_request_that_speaks_before_the_text_is_complete(
    q3_server, q3_engine
):
    """Text in three pieces with final:false, then final:true: audio comes before the last
    pieces are sent, and the whole response is the engine's audio for one request fed that
    text (not one per sentence)."""
    async with websockets.connect(q3_server.url) as ws:
        await start_session(ws, sampling=STREAM_SAMPLING, output_audio=PCM24, voice="ryan")
        await send(ws, type="text", text=STREAMED[0], final=False)
        await send(ws, type="text", text=STREAMED[1], final=False)
        started, first = await _first_audio(ws)  # the text is not complete yet
        await send(ws, type="text", text=STREAMED[2], final=False)
        await send(ws, type="text", text="", final=True)
        played = await collect_response_after_start(ws, started)
    got = np.frombuffer(first + b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**q3_engine.facts.sampling_defaults, **STREAM_SAMPLING})
    spec = SpeechRequest(STREAMED[0], "ryan", params, text_stream=True)
    stream = await q3_engine.submit(spec)
    q3_engine.append_text(stream.request_id, "".join(STREAMED[1:]), final=True)
    want = np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)])
    # The request read all the text (one frame a token, its first in the prompt) and stopped
    # or ran to length after it.
    assert len(want) >= (len("".join(STREAMED)) - 1) * 1920
    assert played.done["status"] in ("completed", "length")
    assert played.done["audio_ms"] == len(want) // 24
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768


async def test_a_streamed_response_is_cancelled_while_its_text_still_comes(q3_server):
    async with websockets.connect(q3_server.url) as ws:
        await start_session(ws, sampling=STREAM_SAMPLING, output_audio=PCM24, voice="ryan")
        await send(ws, type="text", text="Hello there, this goes on ", final=False)
        await _first_audio(ws)
        await send(ws, type="response.cancel")
        done = None
        while done is None:
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, str) and json.loads(message)["type"] == "response.done":
                done = json.loads(message)
        assert done["status"] == "cancelled"
        # The session goes on: a new response plays in full.
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert played.done["status"] in ("completed", "length") and played.frames


async def collect_response_after_start(ws, started: dict) -> Played:
    """collect_response for a response whose response.started was read already."""
    played = Played(started=started, done={})
    while True:
        message = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(message, bytes):
            played.frames.append(message)
            continue
        event = json.loads(message)
        if event["type"] == "response.done":
            played.done = event
            return played
        played.events.append(event)
