"""Every error code and close code of docs/protocol.md, provoked over a real socket.

Before `session.start` an error ends the connection (the close code says which kind); after it,
errors are non-fatal and the session keeps working, which each test proves by finishing with a
normal `session.end`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from gateway_testkit import (
    collect_response,
    expect_close,
    recv_json,
    send,
    start_server,
    start_session,
    wait_engine_idle,
)

from voxgate.client import Overloaded, connect


async def first_message_fails(url: str, frame, code: str, close: int) -> None:
    async with websockets.connect(url) as ws:
        await ws.send(frame)
        close_code, messages = await expect_close(ws)
    assert close_code == close, (frame, messages)
    assert len(messages) == 1 and messages[0]["type"] == "error", messages
    assert messages[0]["code"] == code and messages[0]["fatal"] is True


@pytest.mark.parametrize(
    "frame, code, close",
    [
        ("{oops", "bad_json", 1007),
        ('"just a string"', "bad_json", 1007),
        (b"\x00\x01binary first", "not_started", 1008),
        ('{"type": "text", "text": "hello"}', "not_started", 1008),
        ('{"type": "dance"}', "unknown_type", 1008),
        ('{"type": "session.start", "output_audio": {"format": "mp3"}}', "unsupported_audio", 1003),
        (
            '{"type": "session.start", "output_audio": {"format": "pcm16", "sample_rate": 11025}}',
            "unsupported_audio",
            1003,
        ),
        ('{"type": "session.start", "sampling": {"temperature": 99}}', "bad_field", 1007),
        ('{"type": "session.start", "sampling": {"top_k": "many"}}', "bad_field", 1007),
        ('{"type": "session.start", "voice": "nobody"}', "bad_field", 1007),
        ('{"type": "session.start", "model": "another-model"}', "bad_field", 1007),
    ],
)
async def test_bad_first_message_is_fatal(server, frame, code, close):
    await first_message_fails(server.url, frame, code, close)


async def expect_error(ws, code: str) -> dict:
    event = await recv_json(ws)
    assert event["type"] == "error" and event["code"] == code and event["fatal"] is False, event
    return event


async def end_normally(ws) -> None:
    await send(ws, type="session.end")
    code, messages = await expect_close(ws)
    assert code == 1000 and messages[-1] == {"type": "session.ended", "reason": "client_ended"}


async def test_errors_after_start_are_not_fatal(server):
    limits = None
    async with websockets.connect(server.url) as ws:
        limits = (await start_session(ws))["limits"]
        cases = [
            ("{oops", "bad_json"),
            ("[]", "bad_json"),
            ('{"type": "sing"}', "unknown_type"),
            ('{"type": "text", "text": 42}', "bad_field"),
            ('{"type": "text", "text": "   "}', "bad_field"),
            ('{"type": "playback", "played_ms": "soon"}', "bad_field"),
            ('{"type": "session.start"}', "already_started"),
            ('{"type": "input.commit"}', "unsupported_input"),
            (b"\x01" * 100, "unsupported_input"),  # audio to a text-only model
            (b"\x01" * (limits["max_frame_bytes"] + 1), "too_large"),
            (
                json.dumps({"type": "text", "text": "a" * (limits["max_text_chars"] + 1)}),
                "too_large",
            ),
        ]
        for frame, code in cases:
            await ws.send(frame)
            await expect_error(ws, code)
        await end_normally(ws)


async def test_response_text_cap(make_server):
    srv = make_server(max_text_chars=100, max_response_text_chars=150)
    async with websockets.connect(srv.url) as ws:
        await start_session(ws)
        await send(ws, type="text", text="word " * 19, final=False)  # 95 chars, no boundary
        await send(ws, type="text", text="more " * 19, final=False)  # 190 in all: refused
        # The first text opened a response; the refusal may overtake its response.started.
        events = [await recv_json(ws), await recv_json(ws)]
        assert sorted(e["type"] for e in events) == ["error", "response.started"]
        assert next(e for e in events if e["type"] == "error")["code"] == "too_large"
        await send(ws, type="response.cancel")
        await end_normally(ws)


async def test_frame_over_the_hard_limit_closes_1009(server):
    async with websockets.connect(server.url, max_size=None) as ws:
        limits = (await start_session(ws))["limits"]
        await ws.send(b"\x00" * (limits["max_message_bytes"] + 1))
        code, messages = await expect_close(ws)
    assert code == 1009
    assert messages == [
        {"type": "error", "code": "too_large", "fatal": True, "message": messages[0]["message"]}
    ]


async def test_frame_over_the_transport_limit_closes_1009(server):
    async with websockets.connect(server.url) as ws:
        limits = (await start_session(ws))["limits"]
        await ws.send("x" * (5 * limits["max_message_bytes"]))
        code, _ = await expect_close(ws)
    assert code == 1009


async def test_too_many_waiting_responses_is_rate_limited(make_server):
    srv = make_server(max_queued_responses=1)
    async with websockets.connect(srv.url) as ws:
        await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 30})
        await send(ws, type="text", text="One.")  # plays
        await send(ws, type="text", text="Two.")  # waits
        await send(ws, type="text", text="Three.")  # one too many
        seen = []
        while not seen or seen[-1]["type"] != "error":
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, str):
                seen.append(json.loads(message))
        # The refusal is immediate: nothing of the first response has to finish before it.
        assert all(e["type"] == "response.started" for e in seen[:-1]), seen
        assert seen[-1]["code"] == "rate_limited" and seen[-1]["fatal"] is False
        await send(ws, type="response.cancel")
        await end_normally(ws)


async def test_session_cap_refuses_with_1013(make_server):
    srv = make_server(max_sessions=1)
    async with connect(srv.url) as first:
        with pytest.raises(Overloaded) as refused:  # the `error` event, then the close
            await connect(srv.url)
        assert refused.value.close_code == 1013
        assert refused.value.code == "overloaded" and refused.value.fatal is True
        assert await first.end() == "client_ended" and first.close_code == 1000


async def test_start_timeout_closes_1008(make_server):
    srv = make_server(start_timeout_s=0.3)
    async with websockets.connect(srv.url) as ws:
        code, messages = await expect_close(ws, timeout=5)
    assert code == 1008
    assert messages[0]["code"] == "not_started" and messages[0]["fatal"] is True


async def test_idle_timeout_ends_the_session(make_server):
    srv = make_server(idle_timeout_s=1.0)
    async with websockets.connect(srv.url) as ws:
        await start_session(ws)
        code, messages = await expect_close(ws, timeout=5)
    assert code == 1000
    assert messages == [{"type": "session.ended", "reason": "idle_timeout"}]


async def test_engine_refusing_a_request_is_overloaded(engine):
    """A request the KV pool can never hold: error `overloaded`, response `failed`, session on."""
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.config import GatewaySettings

    small = build_engine("tiny-orpheus", config=EngineConfig(num_kv_blocks=4))  # 64 tokens
    srv = start_server(GatewaySettings(model="tiny-orpheus"), small)
    try:
        async with websockets.connect(srv.url) as ws:
            await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 200})
            await send(ws, type="text", text="This will not fit.")
            assert (await recv_json(ws))["type"] == "response.started"
            await expect_error(ws, "overloaded")
            done = await recv_json(ws)
            assert done["type"] == "response.done" and done["status"] == "failed"
            assert done["audio_ms"] == 0 and done["ttfa_ms"] is None
            await end_normally(ws)
    finally:
        srv.stop()
        await small.shutdown()


async def test_engine_failure_is_model_error_then_1011(engine):
    """The engine loop dies mid-response: model_error and response.done failed for the response,
    then a fatal `internal` error and close 1011; new sessions are refused with 1013."""
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.config import GatewaySettings

    # Real-time admission off, as in the shared engine (conftest.py): its calibration at
    # warm-up has nothing to do with a loop that dies.
    doomed = build_engine(
        "tiny-orpheus", config=EngineConfig(kv_cache_mb=8, realtime_admission=False)
    )
    srv = start_server(GatewaySettings(model="tiny-orpheus"), doomed)
    try:
        async with websockets.connect(srv.url) as ws:
            await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 600})
            await send(ws, type="text", text="Speak until the engine breaks.")
            assert (await recv_json(ws))["type"] == "response.started"
            assert isinstance(await asyncio.wait_for(ws.recv(), 30), bytes)

            def boom():
                raise RuntimeError("simulated device failure")

            doomed.core.step = boom
            code, messages = await expect_close(ws, timeout=15)
        events = [m for m in messages if isinstance(m, dict)]
        assert code == 1011
        assert [e["type"] for e in events] == ["error", "response.done", "error"]
        assert events[0]["code"] == "model_error" and "simulated" in events[0]["message"]
        assert events[1]["status"] == "failed"
        assert events[2]["code"] == "internal" and events[2]["fatal"] is True
        async with websockets.connect(srv.url) as ws:
            await send(ws, type="session.start")
            code, messages = await expect_close(ws)
        assert code == 1013 and messages[0]["code"] == "overloaded"
    finally:
        srv.stop()
        await doomed.shutdown()
    await wait_engine_idle(engine)  # the shared engine never noticed


async def test_one_bad_session_does_not_disturb_another(server):
    async with websockets.connect(server.url) as good:
        await start_session(good)
        await send(good, type="text", text="I keep talking while the other one misbehaves.")
        async with websockets.connect(server.url) as bad:
            await bad.send("{garbage")
            code, _ = await expect_close(bad)
            assert code == 1007
        played = await collect_response(good)
        assert played.done["status"] == "length" and played.frames
        await end_normally(good)
