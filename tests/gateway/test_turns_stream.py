"""Turn-based speech-to-speech sessions (tiny-glm-voice) through a real uvicorn server, with
speech synthesized offline by flite: speech then silence → speech events and a spoken reply
with transcript; speech during a reply → barge-in (cancelled, the reply kept in the history
only as far as the user heard it); later turns reuse the conversation's KV; manual turns with
`input.commit`; bad input answered with errors, never a crash."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest
import websockets
from gateway_testkit import (
    expect_close,
    fail_first_encoder,
    flite_speech,
    quiet_room,
    recv_json,
    send,
    start_server,
    start_session,
    wait_engine_idle,
)

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

RATE = 16000
FRAME = RATE // 50  # 20 ms
PCM16_IN = {"format": "pcm16", "sample_rate": RATE}
PCM16_OUT = {"format": "pcm16", "sample_rate": RATE, "frame_ms": 20}
# Greedy; a short reply keeps the test quick: 60 tokens are GLM-4-Voice's blocks of 13 text
# and 26 speech tokens, then 13 text and 8 speech (34 speech tokens: 2.72 s, paced to real
# time), long enough to still be playing when a test cuts in 480 ms into it.
SAMPLING = {"temperature": 0.0, "max_tokens": 60}
SPEECH_TOKEN_S = 0.08  # GLM-4-Voice: 12.5 speech tokens per second


def frames_of(pcm: np.ndarray) -> list[bytes]:
    data = (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()
    return [data[i : i + 2 * FRAME] for i in range(0, len(data), 2 * FRAME)]


def utterance(text: str, tmp_path, seed: int) -> list[bytes]:
    """Half a second of room, the words, then a second of room (the end of the turn)."""
    words = flite_speech(text, tmp_path, RATE)
    return frames_of(
        np.concatenate([quiet_room(0.5, RATE, seed), words, quiet_room(1.0, RATE, seed + 1)])
    )


async def send_frames(ws, frames: list[bytes]) -> None:
    for frame in frames:  # faster than real time: turn detection runs on the audio's clock
        await ws.send(frame)


async def read_until(ws, kind: str, timeout: float = 60) -> tuple[list[dict], int]:
    """Events up to and including the first of type `kind`, and the audio bytes in between."""
    events, audio = [], 0
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += len(message)
                continue
            events.append(json.loads(message))
            if events[-1]["type"] == kind:
                return events, audio


def audio_tokens(model, turn) -> int:
    return sum(model.ids.is_audio(t) for t in turn.token_ids)


def test_spoken_turns_barge_in_and_reuse_of_the_conversation_kv(
    glm_server, glm_engine, conversations, tmp_path
):
    model = glm_engine.core.model
    reused_before = glm_engine.stats().prefix_reused_tokens

    async def main():
        async with websockets.connect(glm_server.url, max_size=None) as ws:
            started = await start_session(
                ws,
                input_audio=PCM16_IN,
                output_audio=PCM16_OUT,
                turn_detection={"type": "vad", "silence_ms": 400},
                sampling=SAMPLING,
            )
            assert started["input_audio"]["format"] == "pcm16"
            assert started["model_kind"] == "turns"
            # Turn 1: speech, silence → speech events, then a whole spoken reply.
            await send_frames(ws, utterance("What is the weather like today?", tmp_path, 1))
            events, audio = await read_until(ws, "response.done")
            types = [e["type"] for e in events]
            assert types[:3] == ["input.speech_started", "input.speech_stopped", "response.started"]
            assert "transcript.delta" in types
            assert 1000 <= events[1]["audio_ms"] - events[0]["audio_ms"] <= 3000
            first = events[-1]
            assert first["status"] in ("completed", "length")
            assert first["audio_ms"] > 0 and audio == first["audio_ms"] * 2 * RATE // 1000

            # Turn 2: a reply the user interrupts once 400 ms of it have played.
            await send_frames(ws, utterance("Tell me a long story please.", tmp_path, 3))
            events, _ = await read_until(ws, "response.started")
            # Receive 480 ms before cutting in, so that the 480 ms reported below exist on
            # every machine (a slow one may not have made a sixth token by the cut otherwise).
            heard = 0
            while heard < 480 * 2 * RATE // 1000:
                message = await asyncio.wait_for(ws.recv(), 30)
                heard += len(message) if isinstance(message, bytes) else 0
            await send(ws, type="playback", played_ms=400)
            interruption = utterance("Stop. What about tomorrow?", tmp_path, 5)
            half = len(interruption) // 2  # into the words: the reply is cut, the turn goes on
            await send_frames(ws, interruption[:half])
            events, _ = await read_until(ws, "response.done")
            types = [e["type"] for e in events]
            assert "input.speech_started" in types
            assert types.index("input.speech_started") < types.index("response.done")
            assert events[-1]["status"] == "cancelled"
            # The report that was in flight at the cut: the user heard 480 ms, not 400.
            await send(ws, type="playback", played_ms=480)
            await send_frames(ws, interruption[half:])
            # Turn 3 answers the interruption.
            events, _ = await read_until(ws, "response.done")
            assert events[-1]["status"] in ("completed", "length")
            await send(ws, type="session.end")
            code, _ = await expect_close(ws)
            assert code == 1000

    asyncio.run(main())
    (conversation,) = conversations
    history = conversation.history
    assert len(history) == 6  # user, reply, user, reply (cut), user, reply
    assert audio_tokens(model, history[1]) > int(0.4 / SPEECH_TOKEN_S)  # a whole reply, kept
    # The interrupted reply is kept up to what was heard, by the last report that came before
    # the next turn (even after the cut): 480 ms = 6 speech tokens.
    cut = history[3]
    assert audio_tokens(model, cut) == int(0.48 / SPEECH_TOKEN_S)
    assert model.ids.is_audio(cut.token_ids[-1])
    # Turn 2 reused the KV of turn 1 (its prompt and reply, whole pages of it) instead of
    # prefilling it again; turn 3 the KV up to the cut reply.
    block = glm_engine.core.config.block_size
    first_turn = len(model.preprocess_turns(history[:1]).token_ids) + len(history[1].token_ids)
    reused = conversation.reused_tokens
    assert reused[0] == 0 and first_turn - block < reused[1] <= first_turn
    assert reused[2] > reused[1]
    assert glm_engine.stats().prefix_reused_tokens - reused_before == sum(reused)
    asyncio.run(wait_engine_idle(glm_engine))  # the session's end freed its kept KV


def test_manual_turns_with_input_commit_and_bad_input(glm_server, glm_engine, tmp_path):
    async def main():
        async with websockets.connect(glm_server.url, max_size=None) as ws:
            await start_session(
                ws,
                input_audio=PCM16_IN,
                output_audio=PCM16_OUT,
                turn_detection={"type": "none"},
                sampling=SAMPLING,
            )
            await send(ws, type="input.commit")  # nothing said yet
            error = await recv_json(ws)
            assert error["type"] == "error" and error["code"] == "bad_field"
            assert "input.commit" in error["message"] and not error["fatal"]
            await ws.send(b"\x01\x02\x03")  # not whole 16-bit samples
            error = await recv_json(ws)
            assert error["code"] == "unsupported_audio" and not error["fatal"]
            await send(ws, type="text", text="Hi.", model_options={"exaggeration": 1.0})
            error = await recv_json(ws)
            assert error["code"] == "bad_field" and "takes no model_options" in error["message"]
            # No turn detection: no speech events, the turn ends at the commit.
            await send_frames(ws, utterance("Hello there.", tmp_path, 7))
            await send(ws, type="input.commit")
            events, audio = await read_until(ws, "response.done")
            assert [e["type"] for e in events][0] == "response.started"
            assert not any(e["type"].startswith("input.") for e in events)
            assert events[-1]["status"] in ("completed", "length") and audio > 0
            # response.cancel stops a reply like speech does.
            await send_frames(ws, utterance("And again.", tmp_path, 9))
            await send(ws, type="input.commit")
            await read_until(ws, "response.started")
            await send(ws, type="response.cancel")
            events, _ = await read_until(ws, "response.done")
            assert events[-1]["status"] == "cancelled"
            # Typed text is a user turn of the same conversation.
            await send(ws, type="text", text="How are you?")
            events, _ = await read_until(ws, "response.done")
            assert "transcript.delta" in [e["type"] for e in events]
            # session.end during a reply: its response.done, then session.ended.
            await send(ws, type="text", text="Tell me more.")
            await read_until(ws, "response.started")
            await send(ws, type="session.end")
            events, _ = await read_until(ws, "session.ended")
            assert [e["type"] for e in events][-2:] == ["response.done", "session.ended"]
            assert events[-2]["status"] == "cancelled"
        await wait_engine_idle(glm_engine)  # the close freed the conversation's KV

    asyncio.run(main())


def test_a_reply_whose_encoder_process_died_fails_alone(glm_server, glm_engine, monkeypatch):
    # With --encode-processes a reply's encoder lives in a worker process; if that dies, the
    # reply fails with an error that says so, and the conversation goes on.
    raised = fail_first_encoder(monkeypatch)

    async def main():
        async with websockets.connect(glm_server.url, max_size=None) as ws:
            await start_session(
                ws, output_audio=PCM16_OUT, turn_detection={"type": "none"}, sampling=SAMPLING
            )
            await send(ws, type="text", text="Hello there.")
            events, audio = await read_until(ws, "response.done")
            [error] = [e for e in events if e["type"] == "error"]
            assert error["code"] == "internal" and "encoder process" in error["message"]
            assert not error["fatal"]
            assert events[-1]["status"] == "failed" and audio == 0
            await send(ws, type="text", text="How are you?")
            events, audio = await read_until(ws, "response.done")
            assert events[-1]["status"] in ("completed", "length") and audio > 0
            assert "error" not in [e["type"] for e in events]
        await wait_engine_idle(glm_engine)  # the failed reply's engine request was freed too

    asyncio.run(main())
    assert raised  # the dead encoder was the one the first reply used


@pytest.fixture(scope="module")
def glm_process_server():
    """tiny-glm-voice with the engine in a process of its own (the GPU default); real-time
    admission off, as in glm_engine (conftest.py), whose replies it is compared with."""
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from engine.process_engine import ProcessEngine
    from gateway.config import GatewaySettings

    engine = build_engine(
        "tiny-glm-voice",
        config=EngineConfig(kv_cache_mb=64, engine_process=True, realtime_admission=False),
    )
    assert isinstance(engine, ProcessEngine)
    server = start_server(GatewaySettings(model="tiny-glm-voice"), engine)
    yield server, engine
    server.stop()
    asyncio.run(engine.shutdown())


async def typed_turn(url: str, text: str) -> tuple[dict, int, str]:
    """One typed turn on a new session: its response.done, audio bytes and transcript."""
    async with websockets.connect(url, max_size=None) as ws:
        await start_session(
            ws, output_audio=PCM16_OUT, turn_detection={"type": "none"}, sampling=SAMPLING
        )
        await send(ws, type="text", text=text)
        events, audio = await read_until(ws, "response.done")
    transcript = "".join(e["text"] for e in events if e["type"] == "transcript.delta")
    return events[-1], audio, transcript


def test_turns_with_the_engine_in_its_own_process(
    glm_process_server, glm_server, glm_engine, conversations, tmp_path
):
    """The turns' model work (the speech tokenizer, a reply's cut to what was heard) is asked
    of the engine over its contract, so the engine may run in a process of its own: a spoken
    turn is heard and answered, a barge-in keeps what was heard, and a typed turn gets the very
    reply the thread engine gives."""
    server, engine = glm_process_server
    model = glm_engine.core.model  # the same tiny checkpoint, loaded here to count tokens

    async def main():
        async with websockets.connect(server.url, max_size=None) as ws:
            await start_session(
                ws,
                input_audio=PCM16_IN,
                output_audio=PCM16_OUT,
                turn_detection={"type": "vad", "silence_ms": 400},
                sampling=SAMPLING,
            )
            await send_frames(ws, utterance("What is the weather like today?", tmp_path, 1))
            events, audio = await read_until(ws, "response.done")
            types = [e["type"] for e in events]
            assert types[:3] == ["input.speech_started", "input.speech_stopped", "response.started"]
            assert "transcript.delta" in types
            assert events[-1]["status"] in ("completed", "length") and audio > 0
            # A reply cancelled once 400 ms of it have played.
            await send(ws, type="text", text="Tell me a long story please.")
            await read_until(ws, "response.started")
            heard = 0
            while heard < 480 * 2 * RATE // 1000:
                message = await asyncio.wait_for(ws.recv(), 30)
                heard += len(message) if isinstance(message, bytes) else 0
            await send(ws, type="playback", played_ms=400)
            await send(ws, type="response.cancel")
            events, _ = await read_until(ws, "response.done")
            assert events[-1]["status"] == "cancelled"
            await send(ws, type="session.end")
            code, _ = await expect_close(ws)
            assert code == 1000
        await wait_engine_idle(engine)  # the session's end freed its kept KV

    asyncio.run(main())
    (conversation,) = conversations
    spoken, reply, typed, cut = conversation.history
    assert spoken.speech_tokens and audio_tokens(model, reply) > 0
    assert typed.text == "Tell me a long story please."
    assert audio_tokens(model, cut) == int(0.4 / SPEECH_TOKEN_S)

    async def both():
        # At once: each engine serves only its own turn, greedy, so its reply is the same as
        # alone, and the two replies' real-time playback overlaps instead of adding up.
        return await asyncio.gather(
            typed_turn(server.url, "How are you?"), typed_turn(glm_server.url, "How are you?")
        )

    (done, audio, transcript), (want_done, want_audio, want_transcript) = asyncio.run(both())
    assert done["status"] == want_done["status"] and done["audio_ms"] == want_done["audio_ms"]
    assert audio == want_audio > 0 and transcript == want_transcript != ""
