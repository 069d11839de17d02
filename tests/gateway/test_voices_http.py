"""`GET /v1/voices` against a real server serving tiny-orpheus: the model's voices and its
default, the same auth as the other routes, and every listed voice accepted by /v1/stream and
POST /v1/audio/speech (an unlisted one refused by both, naming the list)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets
from gateway_testkit import FAST_SAMPLING, expect_close, recv_json, send, start_session

from models.orpheus.model import VOICES

KEY = "voices-key-0001"


def get_voices(server, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{server.http}/v1/voices", headers=headers, timeout=10)


def test_lists_the_model_presets_and_its_default(server, engine):
    response = get_voices(server)
    assert response.status_code == 200
    body = response.json()
    assert body["model"] == engine.facts.name == "tiny-orpheus"
    assert [v["name"] for v in body["voices"]] == list(VOICES)
    assert {v["source"] for v in body["voices"]} == {"preset"}
    assert body["default_voice"] == "tara"
    assert body["default_voice"] in [v["name"] for v in body["voices"]]
    assert body["cloning"] is False


@pytest.fixture(scope="module")
def secured(make_server):
    return make_server(api_keys=(KEY,))


def test_auth_is_enforced(secured):
    no_key = get_voices(secured)
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    wrong = get_voices(secured, "wrong-key")
    assert wrong.status_code == 403
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert get_voices(secured, KEY).json()["voices"]


def test_only_get_post_and_delete_are_allowed(server):
    """GET lists, POST adds a voice from a clip, DELETE /v1/voices/{name} removes one
    (tests/gateway/test_client_voices.py); nothing else is a route."""
    assert httpx.put(f"{server.http}/v1/voices", timeout=10).status_code == 405
    assert httpx.patch(f"{server.http}/v1/voices", timeout=10).status_code == 405
    assert httpx.delete(f"{server.http}/v1/voices", timeout=10).status_code == 405


def test_a_model_that_cannot_clone_refuses_a_clip(server):
    response = httpx.post(f"{server.http}/v1/voices", json={"audio": "AAAA"}, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "cloning_unsupported"
    assert "tiny-orpheus cannot make a voice" in response.json()["error"]["message"]

    async def inline() -> None:
        async with websockets.connect(server.url) as ws:
            await send(ws, type="session.start", voice_clip={"audio": "AAAA", "transcript": "Hi."})
            code, messages = await expect_close(ws)
        error = next(m for m in messages if isinstance(m, dict) and m["type"] == "error")
        assert error["code"] == "unsupported_input" and error["fatal"] and code == 1003
        assert error["message"].endswith("(cloning_unsupported)")

    asyncio.run(inline())


def test_every_listed_voice_starts_a_stream_session(server):
    names = [v["name"] for v in get_voices(server).json()["voices"]]

    async def start_each() -> None:
        for name in names:
            async with websockets.connect(server.url) as ws:
                await start_session(ws, voice=name)
        async with websockets.connect(server.url) as ws:
            await send(ws, type="session.start", voice="nobody", sampling=FAST_SAMPLING)
            error = await recv_json(ws)
            assert error["type"] == "error", error
            assert all(name in error["message"] for name in names)

    asyncio.run(start_each())


def test_every_listed_voice_is_accepted_by_the_speech_endpoint(server):
    names = [v["name"] for v in get_voices(server).json()["voices"]]
    for name in names:
        body = {"model": "tiny-orpheus", "input": "Hi.", "voice": name, "response_format": "pcm"}
        response = httpx.post(
            f"{server.http}/v1/audio/speech",
            json={**body, **FAST_SAMPLING},
            timeout=60,
        )
        assert response.status_code == 200, (name, response.text)
        assert len(response.content) > 0
    refused = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"model": "tiny-orpheus", "input": "Hi.", "voice": "nobody"},
        timeout=10,
    )
    assert refused.status_code == 400
    assert all(name in refused.json()["error"]["message"] for name in names)


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"audio": 5}, "audio", "`audio` must be the clip file, base64-encoded"),
        ({"audio": "AAAA", "transcript": 3}, "transcript", "`transcript` must be a string"),
        ({"audio": "AAAA", "lang": "en"}, "lang", "unknown field `lang`; known: audio"),
    ],
)
def test_a_misshapen_clip_body_names_the_field_as_the_client_sent_it(server, body, param, says):
    """The body's fields are top-level: an error names `audio`, not `body.audio`, and says
    which in `param`, as the speech endpoint's errors do."""
    response = httpx.post(f"{server.http}/v1/voices", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(says)
