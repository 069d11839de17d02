"""`POST /v1/audio/speech` with the official `openai` client against a real server on loopback
serving tiny-orpheus: every response format decodes to the audio the engine made, SSE events
parse, bad input gets OpenAI-shaped 400s, auth and admission are enforced, and a client that
disconnects frees its engine request."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import av
import httpx
import numpy as np
import openai
import pytest
from gateway_testkit import FAST_SAMPLING, engine_pcm, wait_engine_idle

TEXT = "Hello there, this is a short test."  # one sentence: one engine request
MODEL = "tiny-orpheus"
KEY = "speech-key-0001"
LONG_SAMPLING = {"temperature": 0.0, "max_tokens": 3000}  # ~37 s of audio: still going


def make_client(server, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key=key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return make_client(server)


@pytest.fixture(scope="module")
def voice(engine) -> str:
    return engine.facts.default_voice


@pytest.fixture(scope="module")
def expected_s(engine) -> float:
    """The length of what the engine itself makes for TEXT with FAST_SAMPLING."""
    pcm = asyncio.run(engine_pcm(engine, TEXT, FAST_SAMPLING))
    return len(pcm) / engine.facts.sample_rate


def speak(client: openai.OpenAI, voice: str, **fields) -> tuple[bytes, httpx.Headers]:
    extra = fields.pop("extra_body", FAST_SAMPLING)
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, input=TEXT, voice=voice, extra_body=extra, **fields
    ) as response:
        return response.read(), response.headers


def decoded(data: bytes) -> tuple[np.ndarray, int]:
    """A response file decoded by PyAV: (mono samples, rate)."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
        return pcm, stream.rate


# mp3 and aac add their encoder's priming and padding (~50-70 ms); the gateway pads the last
# frame to 20 ms.
TOLERANCE_S = 0.1


@pytest.mark.parametrize(
    ("fmt", "content_type"),
    [
        ("mp3", "audio/mpeg"),
        ("opus", "audio/ogg"),
        ("aac", "audio/aac"),
        ("flac", "audio/flac"),
        ("wav", "audio/wav"),
    ],
)
def test_each_format_decodes_to_the_audio_made(client, voice, expected_s, fmt, content_type):
    data, headers = speak(client, voice, response_format=fmt)
    assert headers["content-type"] == content_type
    pcm, rate = decoded(data)
    assert abs(len(pcm) / rate - expected_s) < TOLERANCE_S, (len(pcm) / rate, expected_s)
    assert np.abs(pcm.astype(np.float32)).max() > 0  # audio, not a silent file


def test_pcm_is_24khz_s16le(client, voice, expected_s):
    data, headers = speak(client, voice, response_format="pcm")
    assert headers["content-type"] == "audio/pcm"
    assert len(data) % 2 == 0
    assert abs(len(data) / 2 / 24000 - expected_s) < TOLERANCE_S


def test_a_file_no_one_plays_as_it_comes_reaches_the_engine_so(client, voice, engine, monkeypatch):
    """`realtime: false` (a file to keep) submits requests without a listener
    (SpeechRequest.realtime: the engine runs them behind real-time streams, decoded in its
    codec's large chunks); the audio is the same, but for the float rounding of the
    chunking."""
    submitted = []
    submit = engine.submit

    async def recording_submit(request):
        submitted.append(request.realtime)
        return await submit(request)

    monkeypatch.setattr(engine, "submit", recording_submit)
    heard, _ = speak(client, voice, response_format="pcm")
    kept, _ = speak(
        client, voice, response_format="pcm", extra_body={**FAST_SAMPLING, "realtime": False}
    )
    assert submitted == [True, False]
    heard, kept = np.frombuffer(heard, dtype="<i2"), np.frombuffer(kept, dtype="<i2")
    assert len(kept) == len(heard)
    assert np.abs(kept.astype(np.int32) - heard).max() <= 2


def test_a_whole_max_tokens_written_with_a_fraction_is_an_integer(client, voice, expected_s):
    """JSON's 100.0 is the integer 100: the same audio as the same request sending 100."""
    data, _ = speak(
        client,
        voice,
        response_format="pcm",
        extra_body={**FAST_SAMPLING, "max_tokens": float(FAST_SAMPLING["max_tokens"])},
    )
    assert abs(len(data) / 2 / 24000 - expected_s) < TOLERANCE_S


def test_default_format_is_mp3(client, voice, expected_s):
    data, headers = speak(client, voice)
    assert headers["content-type"] == "audio/mpeg"
    pcm, rate = decoded(data)
    assert abs(len(pcm) / rate - expected_s) < TOLERANCE_S


def test_sse_events_carry_the_audio(client, voice, expected_s):
    with client.audio.speech.with_streaming_response.create(
        model=MODEL,
        input=TEXT,
        voice=voice,
        response_format="pcm",
        stream_format="sse",
        extra_body=FAST_SAMPLING,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line.removeprefix("data: "))
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    *deltas, done = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert abs(len(pcm) / 2 / 24000 - expected_s) < TOLERANCE_S
    assert done["type"] == "speech.audio.done"
    assert done["usage"]["output_tokens"] == FAST_SAMPLING["max_tokens"]
    assert done["usage"]["total_tokens"] >= done["usage"]["output_tokens"]


def test_sse_opus_deltas_join_into_one_file(client, voice, expected_s):
    with client.audio.speech.with_streaming_response.create(
        model=MODEL,
        input=TEXT,
        voice=voice,
        response_format="opus",
        stream_format="sse",
        extra_body=FAST_SAMPLING,
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    data = b"".join(base64.b64decode(e["audio"]) for e in events if "audio" in e)
    pcm, rate = decoded(data)
    assert abs(len(pcm) / rate - expected_s) < TOLERANCE_S


def test_instructions_are_accepted_and_said_to_be_ignored(client, voice):
    data, headers = speak(client, voice, response_format="pcm", instructions="Speak cheerfully.")
    assert len(data) > 0
    assert headers["voxgate-ignored-fields"] == "instructions"
    _, plain = speak(client, voice, response_format="pcm")
    assert "voxgate-ignored-fields" not in plain


def test_openai_model_names_and_voice_objects_are_accepted(client, voice):
    data, _ = speak(client, voice, response_format="pcm")
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        input=TEXT,
        voice={"id": voice},
        response_format="pcm",
        speed=1.0,
        extra_body=FAST_SAMPLING,
    ) as response:
        # Greedy: the same tokens whichever name, so the same audio, to the last bit of PCM16
        # (the codec gives the whole decode whatever the chunking, to float rounding).
        same, first = (np.frombuffer(b, "<i2").astype(np.int32) for b in (response.read(), data))
        assert len(same) == len(first) and np.abs(same - first).max() <= 1


@pytest.mark.parametrize("speed", [1.5, 0.5])
def test_speed_time_stretches_the_audio_made(client, voice, engine, speed):
    """`speed` plays the model's audio at that rate, pitch unchanged: the response is the
    engine's own audio for the text put through the time-stretch (1/speed as long), up to
    PCM16 rounding and the last frame's padding."""
    from gateway.time_stretch import TimeStretcher

    data, _ = speak(client, voice, response_format="pcm", speed=speed)
    heard = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    made = asyncio.run(engine_pcm(engine, TEXT, FAST_SAMPLING))
    stretcher = TimeStretcher(speed, engine.facts.sample_rate)
    want = np.clip(np.concatenate([stretcher.push(made), stretcher.flush()]), -1, 1)
    assert len(want) == round(len(made) / speed)
    assert 0 <= len(heard) - len(want) < 24000 * 20 // 1000  # padded to a whole 20 ms frame
    assert np.abs(heard[: len(want)] - want).max() < 2 / 32768


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"input": ""}, "input", "empty"),
        ({"input": "   "}, "input", "empty"),
        ({"input": "a" * 4097}, "input", "4096"),
        ({"voice": "alloy"}, "voice", "not one of"),
        ({"voice": 7}, "voice", "voice name"),
        ({"response_format": "ogg"}, "response_format", "mp3, opus, aac, flac, wav, pcm"),
        ({"speed": 5.0}, "speed", "[0.25, 4.0]"),
        ({"speed": 0.1}, "speed", "[0.25, 4.0]"),
        ({"speed": "fast"}, "speed", "number"),
        ({"speed": True}, "speed", "number"),
        ({"stream_format": "chunks"}, "stream_format", "audio, sse"),
        ({"model": "whisper-1"}, "model", "tiny-orpheus"),
        ({"instructions": "x" * 4097}, "instructions", "4096"),
        ({"extra_body": {"max_tokens": 0}}, "max_tokens", "max_tokens"),
        ({"extra_body": {"max_tokens": 1.5}}, "max_tokens", "must be an integer"),
        ({"extra_body": {"temperature": "hot"}}, "temperature", "number"),
        ({"extra_body": {"volume": 2}}, "volume", "unrecognized"),
        ({"extra_body": {"min_p": 2.0}}, "min_p", "min_p must be in [0, 1]"),
        (
            {"extra_body": {"model_options": {"exaggeration": 0.7}}},
            "model_options.exaggeration",
            "tiny-orpheus takes no model_options",
        ),
        ({"extra_body": {"model_options": 0.7}}, "model_options", "must be an object"),
        ({"extra_body": {"realtime": "no"}}, "realtime", "true or false"),
    ],
)
def test_bad_input_gets_an_openai_400(client, voice, fields, param, says):
    request = {"model": MODEL, "input": TEXT, "voice": voice, **fields}
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(**request)
    error = info.value.response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert says in error["message"]


def test_a_request_the_engine_refuses_gets_its_error_before_any_audio(client, voice, engine):
    # Below the context, so the gateway passes it on; with the prompt, beyond it.
    max_tokens = engine.facts.max_context - 1
    with pytest.raises(openai.BadRequestError) as info:
        speak(client, voice, response_format="pcm", extra_body={"max_tokens": max_tokens})
    error = info.value.response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"context of {engine.facts.max_context}" in error["message"]


@pytest.mark.parametrize(
    ("text", "max_tokens"),
    [
        (TEXT, 10_000_000),
        # Shared out by length, each sentence's part would fit: still refused as a whole.
        ("One sentence here. Another one there. A third for luck. And a fourth.", None),
    ],
)
def test_max_tokens_beyond_the_context_is_refused_as_session_start_refuses_it(
    server, voice, engine, text, max_tokens
):
    """The reply's max_tokens is checked against the model's context before anything is
    submitted, with the same words as session.start's bad_field."""
    context = engine.facts.max_context
    body = {"model": MODEL, "input": text, "voice": voice, "max_tokens": max_tokens or context}
    response = httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "max_tokens"
    assert error["message"] == (
        f"max_tokens must be below {MODEL}'s context of {context} tokens "
        f"(the prompt takes the rest), got {max_tokens or context}"
    )


def test_body_that_is_not_json_gets_a_400(server):
    response = httpx.post(f"{server.http}/v1/audio/speech", content=b"{not json", timeout=10)
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_body_with_a_lone_surrogate_gets_a_400_not_an_internal_error(server):
    body = json.dumps({"model": MODEL, "input": "Hi \ud800 there", "voice": "x"})  # escaped
    response = httpx.post(f"{server.http}/v1/audio/speech", content=body, timeout=10)
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]["message"]


def test_oversized_body_gets_a_413(server):
    body = json.dumps({"model": MODEL, "input": "a" * 300_000, "voice": "x"})
    response = httpx.post(f"{server.http}/v1/audio/speech", content=body, timeout=10)
    assert response.status_code == 413
    assert "bytes" in response.json()["error"]["message"]


# --- auth and admission ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def secured(make_server):
    return make_server(api_keys=(KEY,), max_sessions_per_key=1)


def test_auth_is_enforced(secured, voice):
    with pytest.raises(openai.PermissionDeniedError) as info:
        speak(make_client(secured, "wrong-key"), voice, response_format="pcm")
    assert info.value.response.json()["error"]["code"] == "invalid_api_key"
    no_key = httpx.post(
        f"{secured.http}/v1/audio/speech",
        json={"model": MODEL, "input": TEXT, "voice": voice},
        timeout=10,
    )
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    data, _ = speak(make_client(secured, KEY), voice, response_format="pcm")
    assert len(data) > 0


def _open_stream(server, voice: str, key: str | None = None) -> tuple[httpx.Client, httpx.Response]:
    """A long speech request whose first audio has arrived (the rest left unread)."""
    http = httpx.Client(timeout=30)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": MODEL, "input": TEXT, "voice": voice, "response_format": "pcm"}
    request = http.build_request(
        "POST", f"{server.http}/v1/audio/speech", json={**body, **LONG_SAMPLING}, headers=headers
    )
    response = http.send(request, stream=True)
    assert response.status_code == 200
    # Kept: a dropped iterator closes the response (a disconnect) when it is collected.
    response.chunks = response.iter_raw()
    next(response.chunks)
    return http, response


def test_a_key_over_its_cap_gets_429_with_retry_after(secured, engine, voice):
    http, response = _open_stream(secured, voice, KEY)
    try:
        with pytest.raises(openai.RateLimitError) as info:
            speak(make_client(secured, KEY), voice, response_format="pcm")
        assert info.value.response.headers["retry-after"] == "1"
        assert "open sessions" in info.value.response.json()["error"]["message"]
    finally:
        response.close()
        http.close()
    asyncio.run(wait_engine_idle(engine))


def test_a_full_server_gets_503_with_retry_after(make_server, engine, voice):
    full = make_server(max_sessions=1)
    http, response = _open_stream(full, voice)
    try:
        with pytest.raises(openai.InternalServerError) as info:
            speak(make_client(full), voice, response_format="pcm")
        assert info.value.status_code == 503
        assert info.value.response.headers["retry-after"] == "1"
        assert info.value.response.json()["error"]["type"] == "server_error"
    finally:
        response.close()
        http.close()
    asyncio.run(wait_engine_idle(engine))


def open_sessions(server) -> float:
    metrics = httpx.get(f"{server.http}/metrics", timeout=10).text
    return next(
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("voxgate_sessions ")
    )


def test_a_speech_request_counts_as_an_open_session_while_it_holds_its_slot(
    make_server, engine, voice
):
    """voxgate_sessions counts what --max-sessions caps: an HTTP request holds a slot too."""
    capped = make_server(max_sessions=1)
    assert open_sessions(capped) == 0
    http, response = _open_stream(capped, voice)
    try:
        assert open_sessions(capped) == 1
    finally:
        response.close()
        http.close()
    asyncio.run(wait_engine_idle(engine))
    deadline = time.monotonic() + 10
    while open_sessions(capped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_sessions(capped) == 0


def test_disconnect_cancels_the_engine_request(server, engine, voice):
    tokens_before = engine.stats().totals.tokens
    http, response = _open_stream(server, voice)
    assert engine.stats().running + engine.stats().waiting == 1
    started = time.monotonic()
    response.close()
    http.close()
    asyncio.run(wait_engine_idle(engine, timeout=10))
    # The request would have run to 3000 tokens (over half a minute of audio); cancelled, it
    # stopped within moments of the disconnect, its KV pages freed.
    assert time.monotonic() - started < 10
    assert engine.stats().totals.tokens - tokens_before < LONG_SAMPLING["max_tokens"]
    assert engine.stats().kv_blocks_used == 0
