"""SIGTERM stops `voxgate serve` gracefully (gateway/startup.py DrainingServer, Gateway.drain):
/ready turns 503 and new sessions (1013) and speech requests (503) are refused at once, the response in flight plays to
its end, the sessions still open are then closed with 1001, the engine is shut down by the
app's lifespan, and the process exits 0 with no engine process left."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import websockets
from reliability_kit import ORPHEUS_ENGINE_PROCESS, ServeProcess, probe

from tests.orphans import kill_left, wait_gone

DRAIN_S = 60.0  # the bound; the response below ends well within it
REPLY_TOKENS = 200  # about 2.4 s of tiny-orpheus audio (82 tokens a second), paced to real time
SHORT_DRAIN_S = 1.0  # a bound the long response below outlasts
LONG_REPLY_TOKENS = 4000  # about 49 s of audio


async def _session(server: ServeProcess, **start) -> websockets.ClientConnection:
    ws = await websockets.connect(server.ws + "/v1/stream", open_timeout=60)
    await ws.send(json.dumps({"type": "session.start", **start}))
    assert json.loads(await ws.recv())["type"] == "session.started"
    return ws


async def _events_until_closed(ws: websockets.ClientConnection) -> list[str]:
    events = []
    try:
        async for message in ws:
            if isinstance(message, str):
                events.append(json.loads(message)["type"])
    except websockets.ConnectionClosed:
        pass
    return events


async def _stop_mid_response(server: ServeProcess, tokens: int, drain_s: float) -> dict:
    sampling = {"max_tokens": tokens, "min_tokens": tokens, "seed": 1}
    streaming = await _session(server, sampling=sampling)
    idle = await _session(server)
    await streaming.send(json.dumps({"type": "text", "text": "Hello there, how are you?"}))
    while not isinstance(await streaming.recv(), bytes):  # audio is playing
        pass
    stopped_at = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    reading = asyncio.create_task(_events_until_closed(streaming))
    idle_closed = asyncio.create_task(idle.wait_closed())
    ready_during_drain = await probe(server, "/ready")
    late = await websockets.connect(server.ws + "/v1/stream", open_timeout=10)
    refusal = json.loads(await late.recv())  # refused as soon as it is accepted
    await late.wait_closed()
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as http:
        body = {"model": "tiny-orpheus", "input": "Hi.", "voice": "tara"}
        speech = await http.post("/v1/audio/speech", json=body)
    events = await asyncio.wait_for(reading, drain_s + 10)
    await asyncio.wait_for(idle_closed, 10)
    return {
        "ready": ready_during_drain,
        "refusal": (refusal.get("code"), late.close_code),
        "speech": (speech.status_code, speech.headers.get("retry-after")),
        "events": events,
        "closes": (streaming.close_code, idle.close_code),
        "drained_s": time.monotonic() - stopped_at,
    }


def _stopped(tmp_path, tokens: int, drain_s: float) -> dict:
    """A server stopped (SIGTERM) while a response of `tokens` plays; what the clients saw,
    once the process has exited 0 and its engine process is gone."""
    server = ServeProcess(
        *ORPHEUS_ENGINE_PROCESS, "--drain-timeout", str(drain_s), log=tmp_path / "serve.log"
    )
    engines = server.engine_pids()
    try:
        seen = asyncio.run(_stop_mid_response(server, tokens, drain_s))
        exit_code = server.proc.wait(30)
        log = server.log_text()
        assert seen["ready"] == 503, log[-3000:]
        assert seen["refusal"] == ("overloaded", 1013), seen
        assert seen["speech"] == (503, "1"), seen  # HTTP speech requests are refused too
        assert seen["closes"] == (1001, 1001), seen
        assert exit_code == 0, log[-3000:]
        assert all(wait_gone(pid, 20) for pid in engines), log[-3000:]
        assert "leaked semaphore" not in log and "Traceback" not in log, log[-3000:]
        assert log.count("no API keys configured") == 1, log[-3000:]  # said once it serves
        return seen
    finally:
        server.stop()
        kill_left(engines)


def test_sigterm_lets_the_response_in_flight_finish_then_exits_cleanly(tmp_path):
    seen = _stopped(tmp_path, REPLY_TOKENS, DRAIN_S)
    assert "response.done" in seen["events"], seen  # played to its end
    assert seen["drained_s"] < DRAIN_S, seen  # then closed, without waiting for the bound


def test_a_response_longer_than_the_drain_is_closed_with_1001_at_the_bound(tmp_path):
    seen = _stopped(tmp_path, LONG_REPLY_TOKENS, SHORT_DRAIN_S)
    assert "response.done" not in seen["events"], seen
    assert SHORT_DRAIN_S <= seen["drained_s"] < SHORT_DRAIN_S + 6, seen  # + close_timeout_s
