"""Voices from clients against a real server serving tiny-csm, its engine in a process of its
own under the supervisor (the clip is encoded there, where the model lives; conftest.py
`csm_voices`): POST /v1/voices and session.start's
voice_clip make a voice that speaks as a --voices-dir voice of the same clip does, one API key
never sees another's, DELETE and the per-key LRU make the engine forget a voice, and bad clips
are refused over HTTP and on the socket with the check that failed."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import numpy as np
import pytest
import websockets
from clip_files import (
    VOICE_CLIP,
    VOICE_TRANSCRIPT,
    VOICES_KEYS,
    VoicesServer,
    b64,
    noise,
    wav_bytes,
)
from gateway_testkit import collect_response, expect_close, send, start_session

from engine.api import ModelInputError
from engine.outputs import SpeechRequest

KEYS = VOICES_KEYS[:2]  # the browser test uses the third
TEXT = "Hello from a voice of my own."
SAMPLING = {"temperature": 0.0, "max_tokens": 4}
PCM24 = {"format": "pcm16", "sample_rate": 24000}
MAX_CLIP_BYTES = VoicesServer.MAX_CLIP_BYTES


@pytest.fixture(scope="module")
def csm(csm_voices):
    return csm_voices.server, csm_voices.engine


CLIP, TRANSCRIPT = VOICE_CLIP, VOICE_TRANSCRIPT


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def add_voice(server, key: str = KEYS[0], **body) -> httpx.Response:
    body = {"audio": b64(CLIP), "transcript": TRANSCRIPT, **body}
    return httpx.post(f"{server.http}/v1/voices", json=body, headers=auth(key), timeout=60)


def listed(server, key: str) -> list[dict]:
    response = httpx.get(f"{server.http}/v1/voices", headers=auth(key), timeout=10)
    assert response.status_code == 200
    return [v for v in response.json()["voices"] if v["source"] == "client"]


async def speak(server, key: str, **start) -> tuple[dict, np.ndarray]:
    async with websockets.connect(server.url, subprotocols=[f"bearer.{key}"]) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24, **start)
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert played.done["status"] == "length"
    return started, np.frombuffer(b"".join(played.frames), "<i2")


def same_audio(a: np.ndarray, b: np.ndarray) -> bool:
    """The same codes decoded: equal but for the codec's float rounding (1 LSB of int16)."""
    return a.shape == b.shape and int(np.abs(a.astype(int) - b.astype(int)).max()) <= 2


async def refused_start(server, key: str, **start) -> tuple[dict, int | None]:
    async with websockets.connect(server.url, subprotocols=[f"bearer.{key}"]) as ws:
        await send(ws, type="session.start", sampling=SAMPLING, **start)
        code, messages = await expect_close(ws)
    errors = [m for m in messages if isinstance(m, dict) and m.get("type") == "error"]
    assert errors, messages
    return errors[0], code


async def test_an_added_voice_speaks_as_the_same_clip_from_the_voices_dir(csm):
    server, _ = csm
    response = add_voice(server, name="me")
    assert response.status_code == 201, response.text
    voice = response.json()
    assert voice["name"].startswith("clip-") and voice["source"] == "client"
    assert voice["label"] == "me" and voice["seconds"] == 2.5
    _, mine = await speak(server, KEYS[0], voice=voice["name"])
    _, narrator = await speak(server, KEYS[0], voice="narrator")
    _, plain = await speak(server, KEYS[0], voice="0")
    # The clip's codes, encoded in the engine process, prompt the model as --voices-dir's do.
    assert same_audio(mine, narrator) and not same_audio(mine, plain)
    # POST /v1/audio/speech takes it too.
    speech = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"model": "tiny-csm", "input": TEXT, "voice": voice["name"]}
        | {"response_format": "pcm", **SAMPLING},
        headers=auth(KEYS[0]),
        timeout=60,
    )
    assert speech.status_code == 200, speech.text
    httpx.delete(f"{server.http}/v1/voices/{voice['name']}", headers=auth(KEYS[0]), timeout=10)


async def test_one_key_never_sees_or_uses_another_keys_voice(csm):
    server, engine = csm
    voice = add_voice(server, KEYS[0]).json()["name"]
    assert voice in [v["name"] for v in listed(server, KEYS[0])]
    assert voice not in [v["name"] for v in listed(server, KEYS[1])]
    error, code = await refused_start(server, KEYS[1], voice=voice)
    # Refused as any voice the key lacks: the voices it lists are the model's, not the owner's.
    assert error["code"] == "bad_field" and code == 1007
    assert error["message"] == f"voice {voice!r} is not one of tiny-csm's: 0, 1, narrator"
    speech = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"model": "tiny-csm", "input": TEXT, "voice": voice, "response_format": "pcm"},
        headers=auth(KEYS[1]),
        timeout=30,
    )
    assert speech.status_code == 400
    assert speech.json()["error"]["message"].endswith("is not one of tiny-csm's: 0, 1, narrator")
    other = httpx.delete(f"{server.http}/v1/voices/{voice}", headers=auth(KEYS[1]), timeout=10)
    assert other.status_code == 404 and other.json()["error"]["code"] == "voice_not_found"
    mine = httpx.delete(f"{server.http}/v1/voices/{voice}", headers=auth(KEYS[0]), timeout=10)
    assert mine.status_code == 204
    assert voice not in [v["name"] for v in listed(server, KEYS[0])]
    await wait_forgotten(engine, voice)  # the engine process dropped it too


async def wait_forgotten(engine, voice: str) -> None:
    for _ in range(50):  # a removal is queued to the engine process, not awaited
        try:
            stream = await engine.submit(SpeechRequest(TEXT, voice))
        except ModelInputError as exc:
            assert "unknown voice" in str(exc)
            return
        engine.cancel(stream.request_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the engine still serves {voice}")


async def test_the_least_recently_used_voice_goes_first(csm):
    server, engine = csm
    first, second = (add_voice(server, KEYS[1]).json()["name"] for _ in range(2))
    await speak(server, KEYS[1], voice=first)  # first is used: second is now the oldest
    third = add_voice(server, KEYS[1]).json()["name"]
    assert [v["name"] for v in listed(server, KEYS[1])] == [first, third]
    await wait_forgotten(engine, second)
    error, _ = await refused_start(server, KEYS[1], voice=second)
    assert error["code"] == "bad_field"
    for voice in (first, third):
        httpx.delete(f"{server.http}/v1/voices/{voice}", headers=auth(KEYS[1]), timeout=10)


async def test_session_start_makes_its_voice_from_an_inline_clip(csm):
    server, _ = csm
    clip = {"audio": b64(CLIP), "transcript": TRANSCRIPT, "name": "inline"}
    started, inline = await speak(server, KEYS[0], voice_clip=clip)
    assert started["voice"].startswith("clip-")
    _, narrator = await speak(server, KEYS[0], voice="narrator")
    assert same_audio(inline, narrator)
    entry = [v for v in listed(server, KEYS[0]) if v["name"] == started["voice"]]
    assert entry and entry[0]["label"] == "inline"
    started, _ = await speak(server, KEYS[0], voice=started["voice"])  # reusable by its id
    httpx.delete(f"{server.http}/v1/voices/{started['voice']}", headers=auth(KEYS[0]), timeout=10)


BAD_CLIPS = {
    "clip_too_short": {"audio": b64(wav_bytes(noise(1.0, 16000), 16000))},
    "clip_too_long": {"audio": b64(wav_bytes(noise(16.0, 16000), 16000))},
    "clip_silent": {"audio": b64(wav_bytes(np.zeros(40000, np.float32), 16000))},
    "clip_unsupported_rate": {"audio": b64(wav_bytes(noise(2.5, 8000), 8000))},
    "clip_not_audio": {"audio": b64(b"this is a text file, not a recording" * 10)},
    "clip_not_base64": {"audio": "%%% not base64 %%%"},
    "transcript_required": {"transcript": None},
}


@pytest.mark.parametrize("check", sorted(BAD_CLIPS))
async def test_bad_clips_are_refused_over_http_and_on_the_socket(csm, check):
    server, _ = csm
    before = listed(server, KEYS[0])
    body = {"audio": b64(CLIP), "transcript": TRANSCRIPT, **BAD_CLIPS[check]}
    response = httpx.post(f"{server.http}/v1/voices", json=body, headers=auth(KEYS[0]), timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == check and error["message"]
    clip = {k: v for k, v in body.items() if v is not None}
    event, code = await refused_start(server, KEYS[0], voice_clip=clip)
    assert event["code"] == "bad_field" and event["fatal"] and code == 1007
    assert event["message"].startswith("voice_clip: ") and f"({check})" in event["message"]
    assert listed(server, KEYS[0]) == before  # nothing was kept


async def test_too_big_is_refused_before_the_body_is_read(csm):
    server, _ = csm
    big = b64(bytes(MAX_CLIP_BYTES + 1024))
    response = add_voice(server, audio=big)
    assert response.status_code == 413 and response.json()["error"]["code"] == "clip_too_large"
    # A body larger than any clip is refused from its Content-Length alone.
    huge = httpx.post(
        f"{server.http}/v1/voices",
        content=b"{" + b" " * (2 * MAX_CLIP_BYTES) + b"}",
        headers={**auth(KEYS[0]), "Content-Type": "application/json"},
        timeout=30,
    )
    assert huge.status_code == 413
    clip = {"audio": big, "transcript": TRANSCRIPT}
    event, code = await refused_start(server, KEYS[0], voice_clip=clip)
    assert event["code"] == "too_large" and code == 1009


async def test_malformed_bodies_name_the_field(csm):
    server, _ = csm
    for body, field in (
        ({"transcript": TRANSCRIPT}, "audio"),
        ({"audio": b64(CLIP), "transcript": TRANSCRIPT, "speaker": 1}, "speaker"),
        ({"audio": b64(CLIP), "transcript": 42}, "transcript"),
    ):
        response = httpx.post(
            f"{server.http}/v1/voices", json=body, headers=auth(KEYS[0]), timeout=10
        )
        assert response.status_code == 400 and field in response.json()["error"]["message"]
    both = {"voice": "0", "voice_clip": {"audio": b64(CLIP), "transcript": TRANSCRIPT}}
    event, code = await refused_start(server, KEYS[0], **both)
    assert event["code"] == "bad_field" and "not both" in event["message"] and code == 1007


def test_auth_is_enforced_on_every_voice_route(csm):
    server, _ = csm
    assert httpx.post(f"{server.http}/v1/voices", json={}, timeout=10).status_code == 401
    assert httpx.delete(f"{server.http}/v1/voices/clip-0", timeout=10).status_code == 401
    assert add_voice(server, "wrong-key").status_code == 403


async def test_voices_outlive_an_engine_the_supervisor_replaces(csm):
    """The engine holds the encoded voices, and the supervisor records each clip: once it has
    replaced a dead engine process, the key's list is unchanged and the voice speaks as it did
    before, on the new engine; removed afterwards, the new engine forgets it. (Last in this
    module: it costs the server a restart.)"""
    server, supervised = csm
    voice = add_voice(server, KEYS[0]).json()["name"]
    _, before = await speak(server, KEYS[0], voice=voice)
    voices_before = listed(server, KEYS[0])
    first = supervised.engine
    os.kill(first._process.pid, signal.SIGKILL)
    for _ in range(3000):
        if supervised.engine is not first and supervised.ready:
            break
        await asyncio.sleep(0.02)
    assert supervised.engine is not first and supervised.ready
    assert listed(server, KEYS[0]) == voices_before
    _, after = await speak(server, KEYS[0], voice=voice)
    assert same_audio(before, after)
    _, narrator = await speak(server, KEYS[0], voice="narrator")  # the new engine's
    assert same_audio(after, narrator)
    removed = httpx.delete(f"{server.http}/v1/voices/{voice}", headers=auth(KEYS[0]), timeout=10)
    assert removed.status_code == 204
    await wait_forgotten(supervised, voice)
