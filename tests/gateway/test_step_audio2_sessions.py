"""Step-Audio 2 (tiny-step-audio2) served as a turn-based speech-to-speech model, with speech
synthesized offline by flite: a spoken turn on `/v1/stream` answered with audio and a
transcript, the next turn reusing the conversation's KV; on `/v1/realtime` the session's
`instructions` become the system prompt of the user turns that follow."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil

import numpy as np
import pytest
import websockets
from gateway_testkit import (
    flite_speech,
    quiet_room,
    send,
    start_server,
    start_session,
    until_event,
    wait_engine_idle,
)

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

RATE = 16000
FRAME = RATE // 50
SAMPLING = {"temperature": 0.0, "max_tokens": 40}  # a short reply keeps the test quick


@pytest.fixture(scope="module")
def step_engine():
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine(
        "tiny-step-audio2", config=EngineConfig(kv_cache_mb=64, realtime_admission=False)
    )
    assert eng.core.model.token2wav is not None
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def step_server(step_engine):
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-step-audio2"), step_engine)
    yield server
    server.stop()


def spoken(text: str, tmp_path, seed: int, rate: int = RATE) -> np.ndarray:
    words = flite_speech(text, tmp_path, rate)
    return np.concatenate([quiet_room(0.5, rate, seed), words, quiet_room(1.0, rate, seed + 1)])


def pcm16(pcm: np.ndarray) -> bytes:
    return (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()


async def read_until(ws, kind: str, timeout: float = 120) -> tuple[list[dict], int]:
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


def test_spoken_turns_on_the_native_stream(step_server, step_engine, conversations, tmp_path):
    async def main():
        async with websockets.connect(step_server.url, max_size=None) as ws:
            started = await start_session(
                ws,
                input_audio={"format": "pcm16", "sample_rate": RATE},
                output_audio={"format": "pcm16", "sample_rate": RATE, "frame_ms": 20},
                turn_detection={"type": "vad", "silence_ms": 400},
                sampling=SAMPLING,
            )
            assert started["model_kind"] == "turns"
            for seed, text in ((1, "What is the weather like?"), (3, "And tomorrow?")):
                data = pcm16(spoken(text, tmp_path, seed))
                for at in range(0, len(data), 2 * FRAME):
                    await ws.send(data[at : at + 2 * FRAME])
                events, audio = await read_until(ws, "response.done")
                types = [e["type"] for e in events]
                assert types[:3] == [
                    "input.speech_started",
                    "input.speech_stopped",
                    "response.started",
                ]
                assert events[-1]["status"] in ("completed", "length")
                assert audio > 0 and audio == events[-1]["audio_ms"] * 2 * RATE // 1000
            await send(ws, type="session.end")

    asyncio.run(main())
    (conversation,) = conversations
    model = step_engine.core.model
    user, reply = conversation.history[:2]
    assert user.audio is not None and user.audio.embeds.shape[0] > 10  # ~1.5 s of words
    codes = sum(model.ids.code_of(t) is not None for t in reply.token_ids)
    assert codes > 0 and conversation.replies == 2
    assert len(conversation.history) == 4 and conversation.reused_tokens[1] > 0
    asyncio.run(wait_engine_idle(step_engine))


async def test_realtime_instructions_become_the_system_prompt(
    step_server, step_engine, conversations, tmp_path
):
    openai = pytest.importorskip("openai")
    api = openai.AsyncOpenAI(
        base_url=step_server.http + "/v1",
        websocket_base_url=step_server.url.removesuffix("/stream"),
        api_key="unused",
    )
    async with api.realtime.connect(model="tiny-step-audio2") as conn:
        await until_event(conn, "session.created")
        session = {
            "type": "realtime",
            "instructions": "You are a pirate. Answer in one sentence.",
            "max_output_tokens": 30,
            "temperature": 0.0,
            "audio": {
                "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}
            },
        }
        await conn.send({"type": "session.update", "session": session})
        await until_event(conn, "session.updated")
        data = pcm16(spoken("Who are you?", tmp_path, 7, rate=24000))
        for at in range(0, len(data), 4800):
            await conn.input_audio_buffer.append(
                audio=base64.b64encode(data[at : at + 4800]).decode()
            )
        done, seen = await until_event(conn, "response.done", timeout=120)
        assert done.response.status in ("completed", "incomplete")
        assert any(e.type == "response.output_audio.delta" for e in seen)
    (conversation,) = conversations
    user = conversation.history[0]
    assert user.system == "You are a pirate. Answer in one sentence."
    prompt = step_engine.core.model.preprocess_turns(conversation.history[:1]).token_ids
    assert "You are a pirate." in step_engine.core.model.tokenizer.decode(prompt)
    await wait_engine_idle(step_engine)


async def test_a_twilio_call_is_answered(step_server, step_engine, conversations, tmp_path):
    from test_twilio import ACCOUNT_SID, CALL_SID, STREAM_SID, FakeTwilio
    from test_twilio_turns import mulaw_chunks

    url = step_server.url.replace("/v1/stream", "/v1/twilio")
    async with websockets.connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.open(temperature="0", max_tokens="40")
        for payload in mulaw_chunks("Hello, who is this?", tmp_path, 9):
            await twilio.caller_speaks(payload)
        media = 0
        while True:  # μ-law media on this stream, then the reply's end mark
            message = await twilio.recv()
            assert message["event"] in ("media", "mark")
            if message["event"] == "media":
                assert message["streamSid"] == STREAM_SID
                media += len(message["media"]["payload"])
            elif message["mark"]["name"].endswith(":end"):
                break
        assert media > 0
        await twilio.send("stop", stop={"accountSid": ACCOUNT_SID, "callSid": CALL_SID})
    (conversation,) = conversations
    assert conversation.history[0].audio is not None and len(conversation.history) == 2
    await wait_engine_idle(step_engine)
