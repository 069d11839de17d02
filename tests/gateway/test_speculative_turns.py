"""Speculative replies (`--speculative-turn-ms`, gateway/speculative_turn.py) through a real
server on tiny-glm-voice, with speech synthesized by flite: a pause in the user's speech begins
the reply, which the client does not see until the VAD's silence confirms the end of turn
(then it plays whole, after `input.speech_stopped`); if the user speaks on instead, the reply
is dropped unseen and the turn, pause and all, is answered once, as one turn."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import numpy as np
import pytest
import websockets
from gateway_testkit import (
    expect_close,
    flite_speech,
    quiet_room,
    send,
    start_server,
    start_session,
)
from test_turns_stream import PCM16_IN, PCM16_OUT, SAMPLING, frames_of, read_until

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

RATE = 16000
EARLY_MS, SILENCE_MS = 100, 400


@pytest.fixture(scope="module")
def speculating_server(glm_engine):
    from gateway.config import GatewaySettings

    settings = GatewaySettings(model="tiny-glm-voice", speculative_turn_ms=EARLY_MS)
    server = start_server(settings, glm_engine)
    yield server
    server.stop()


def speculative_counts(server) -> dict[str, float]:
    text = httpx.get(f"{server.http}/metrics", timeout=10).text
    counts = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith('voxgate_speculative_turns_total{outcome="'):
            counts[name.split('"')[1]] = float(value)
    return counts


async def nothing_but(ws, seconds: float) -> list[str]:
    """The event types that arrive within `seconds` (no audio may arrive)."""
    types = []
    try:
        async with asyncio.timeout(seconds):
            while True:
                message = await ws.recv()
                assert not isinstance(message, bytes), "audio of a reply still speculative"
                types.append(json.loads(message)["type"])
    except TimeoutError:
        return types


async def speak_then_pause(ws, words: np.ndarray, seed: int, wait_s: float) -> None:
    """A session with server VAD; the user says `words` and pauses 240 ms (past early_ms,
    short of silence_ms). For `wait_s` the client sees nothing but the speech's start: a reply
    is begun, and held."""
    await start_session(
        ws,
        input_audio=PCM16_IN,
        output_audio=PCM16_OUT,
        turn_detection={"type": "vad", "silence_ms": SILENCE_MS},
        sampling=SAMPLING,
    )
    room = quiet_room(0.5, RATE, seed)
    for frame in frames_of(np.concatenate([room, words, quiet_room(0.24, RATE, seed + 1)])):
        await ws.send(frame)
    assert await nothing_but(ws, wait_s) == ["input.speech_started"]


def test_a_reply_begun_at_the_pause_is_held_until_the_turn_ends(
    speculating_server, glm_engine, conversations, tmp_path, monkeypatch
):
    words = flite_speech("What is the weather like today?", tmp_path, RATE)
    closing = frames_of(quiet_room(1.0, RATE, 3))
    before = speculative_counts(speculating_server)
    submitted = []
    submit = glm_engine.submit

    def recording_submit(request):
        submitted.append(request)
        return submit(request)

    monkeypatch.setattr(glm_engine, "submit", recording_submit)

    async def main():
        async with websockets.connect(speculating_server.url, max_size=None) as ws:
            # The reply is being made; the client sees none of it while the turn may go on.
            await speak_then_pause(ws, words, seed=1, wait_s=1.5)
            (conversation,) = conversations
            assert conversation._speculation.reply is not None  # begun at the pause
            for frame in closing:
                await ws.send(frame)
            events, audio = await read_until(ws, "response.done")
            types = [e["type"] for e in events]
            assert types[:2] == ["input.speech_stopped", "response.started"]
            assert events[-1]["status"] in ("completed", "length")
            assert audio == events[-1]["audio_ms"] * 2 * RATE // 1000 > 0
            await send(ws, type="session.end")
            assert (await expect_close(ws))[0] == 1000

    asyncio.run(main())
    (conversation,) = conversations
    assert len(conversation.history) == 2 and conversation.replies == 1
    # The engine was told the reply is held until the silence would confirm the turn: at
    # most the rest of it (silence_ms less the pause), less the time the turn took to prepare.
    (request,) = submitted
    assert 0 < request.audible_after_s <= (SILENCE_MS - EARLY_MS) / 1000
    after = speculative_counts(speculating_server)
    assert after.get("confirmed", 0) - before.get("confirmed", 0) == 1


def test_speech_after_the_pause_drops_the_reply_and_the_turn_goes_on(
    speculating_server, conversations, tmp_path
):
    first = flite_speech("Tell me about the sea.", tmp_path, RATE)
    second = flite_speech("And the mountains too.", tmp_path, RATE)
    rest = frames_of(np.concatenate([second, quiet_room(1.0, RATE, 6)]))
    before = speculative_counts(speculating_server)

    async def main():
        async with websockets.connect(speculating_server.url, max_size=None) as ws:
            await speak_then_pause(ws, first, seed=4, wait_s=1.0)
            for frame in rest:  # the user speaks on: the reply begun at the pause is dropped
                await ws.send(frame)
            events, _ = await read_until(ws, "response.done")
            types = [e["type"] for e in events]
            # One turn (no second speech_started: the speech never stopped), one reply.
            assert types[:2] == ["input.speech_stopped", "response.started"]
            assert types.count("response.started") == 1
            assert events[-1]["status"] in ("completed", "length")
            await send(ws, type="session.end")
            assert (await expect_close(ws))[0] == 1000

    asyncio.run(main())
    (conversation,) = conversations
    assert len(conversation.history) == 2 and conversation.replies == 1
    # The user's turn holds both sentences: its speech tokens (12.5 a second) cover them.
    speech_s = len(conversation.history[0].speech_tokens) / 12.5
    assert speech_s > (len(first) + len(second)) / RATE
    after = speculative_counts(speculating_server)
    assert after.get("discarded", 0) - before.get("discarded", 0) >= 1
    assert after.get("confirmed", 0) - before.get("confirmed", 0) == 1


def test_ending_the_session_at_the_pause_drops_the_reply(speculating_server, tmp_path):
    """`session.end` while a reply begun at the pause is held: the reply is dropped unsent (no
    `response.*` event ever comes) and the session closes cleanly, at once."""
    words = flite_speech("Never mind that.", tmp_path, RATE)
    before = speculative_counts(speculating_server)

    async def main():
        async with websockets.connect(speculating_server.url, max_size=None) as ws:
            await speak_then_pause(ws, words, seed=9, wait_s=1.0)
            await send(ws, type="session.end")
            code, messages = await expect_close(ws)
            assert code == 1000
            assert not any(
                isinstance(m, bytes) or m["type"].startswith("response") for m in messages
            )

    asyncio.run(main())
    after = speculative_counts(speculating_server)
    assert after.get("discarded", 0) - before.get("discarded", 0) >= 1
    assert after.get("confirmed", 0) == before.get("confirmed", 0)
