"""The engine killed (SIGKILL) mid-stream: every session on every endpoint is told within a
second, /health stays live while /ready reports the restart, the engine comes back, a new
session speaks, and no KV page is left behind. A voice a client added before the kill speaks
again, as before, on the engine built in its place."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np
import websockets
from clip_files import VOICE_CLIP, VOICE_TRANSCRIPT, b64
from gateway_testkit import collect_response, send, start_session
from reliability_kit import SIZES, ServeProcess, engine_idle, metrics, probe, until

LONG = {"temperature": 0.0, "max_tokens": 3000}  # random weights never stop on their own
TOLD_WITHIN_S = 1.0


async def native_mid_response(server: ServeProcess):
    ws = await websockets.connect(server.ws + "/v1/stream")
    await start_session(ws, sampling=LONG)
    await send(ws, type="text", text="Keep talking for a long while.")
    while not isinstance(await ws.recv(), bytes):  # response.started, then audio
        pass
    return ws


async def realtime_mid_response(server: ServeProcess):
    ws = await websockets.connect(server.ws + "/v1/realtime?model=tiny-orpheus")
    session = {"type": "realtime", "max_output_tokens": 3000}
    await ws.send(json.dumps({"type": "session.update", "session": session}))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    while "audio.delta" not in json.loads(await ws.recv())["type"]:
        pass
    return ws


async def twilio_mid_response(server: ServeProcess):
    ws = await websockets.connect(server.ws + "/v1/twilio")
    sid = "MZ0123456789abcdef0123456789abcdef"
    start = {
        "streamSid": sid,
        "accountSid": "AC1",
        "callSid": "CA1",
        "tracks": ["inbound"],
        "customParameters": {"greeting": "Hello caller.", "max_tokens": "3000"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    }
    await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
    await ws.send(json.dumps({"event": "start", "streamSid": sid, "start": start}))
    while json.loads(await ws.recv())["event"] != "media":
        pass
    return ws


async def told(ws, killed_at: float) -> tuple[int, float, list]:
    """Read until the close: (close code, seconds after the kill, JSON events on the way)."""
    events = []
    try:
        async with asyncio.timeout(10):
            async for message in ws:
                if isinstance(message, str):
                    events.append(json.loads(message))
    except websockets.ConnectionClosed:
        pass
    return ws.close_code, time.monotonic() - killed_at, events


async def test_engine_killed_mid_stream_comes_back(orpheus_server):
    server = orpheus_server
    base = await metrics(server)
    restarts = base.get("voxgate_engine_restarts_total", 0)
    for kill in range(SIZES.kills):
        natives = await asyncio.gather(
            *(native_mid_response(server) for _ in range(SIZES.killed_mid_stream))
        )
        realtime = await realtime_mid_response(server)
        twilio = await twilio_mid_response(server)
        dead = server.kill_engine()
        killed_at = time.monotonic()
        results = await asyncio.gather(
            *(told(ws, killed_at) for ws in [*natives, realtime, twilio])
        )
        for code, after_s, _events in results:
            assert code == 1011 and after_s < TOLD_WITHIN_S, (code, after_s)
        *native_results, (_, _, realtime_events), (_, _, twilio_events) = results
        for _, _, events in native_results:  # native: error internal (fatal) before the close
            errors = [e for e in events if e["type"] == "error"]
            assert errors[-1]["code"] == "internal" and errors[-1]["fatal"], events
        assert any(e["type"] == "error" for e in realtime_events)  # realtime: an error event
        assert all("event" in e for e in twilio_events)  # Twilio: no error message, the close
        # Liveness holds while the engine restarts; readiness says it is not serving.
        assert await probe(server, "/health") == 200
        assert await probe(server, "/ready") == 503
        await until(lambda: _ready(server), 180, "the engine to come back")
        assert dead not in server.engine_pids() and len(server.engine_pids()) == 1
        async with websockets.connect(server.ws + "/v1/stream") as ws:
            await start_session(ws)
            await send(ws, type="text", text="I am back.")
            played = await collect_response(ws)
        assert played.done["status"] == "length" and played.frames
        after = await engine_idle(server)
        assert after["voxgate_engine_kv_blocks_used"] == 0
        assert after["voxgate_engine_restarts_total"] == restarts + kill + 1
        assert after["voxgate_engine_healthy"] == 1
        assert any(k.startswith("voxgate_engine_last_death{") for k in after)
    assert server.alive


async def _ready(server: ServeProcess) -> bool:
    return await probe(server, "/ready") == 200


async def speak_as(server: ServeProcess, voice: str) -> np.ndarray:
    """A short response in `voice`, greedy (the same every time on the same weights)."""
    async with websockets.connect(server.ws + "/v1/stream") as ws:
        await start_session(
            ws,
            voice=voice,
            sampling={"temperature": 0.0, "max_tokens": 4},
            output_audio={"format": "pcm16", "sample_rate": 24000},
        )
        await send(ws, type="text", text="Still me after the crash.")
        played = await collect_response(ws)
    assert played.done["status"] == "length" and played.frames
    return np.frombuffer(b"".join(played.frames), "<i2")


async def test_a_clients_voice_outlives_an_engine_kill(csm_server):
    server = csm_server
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as client:
        added = await client.post(
            "/v1/voices", json={"audio": b64(VOICE_CLIP), "transcript": VOICE_TRANSCRIPT}
        )
        assert added.status_code == 201, added.text
        voice = added.json()["name"]
        before = await speak_as(server, voice)
        restarts = (await metrics(server)).get("voxgate_engine_restarts_total", 0)
        dead = server.kill_engine()
        await until(lambda: _restarted(server, restarts), 180, "the engine to come back")
        assert dead not in server.engine_pids()
        names = [v["name"] for v in (await client.get("/v1/voices")).json()["voices"]]
        assert voice in names
        after = await speak_as(server, voice)
        # The same codes decoded by the new engine: equal but for float rounding.
        assert before.shape == after.shape
        assert int(np.abs(before.astype(int) - after.astype(int)).max()) <= 2
        assert (await client.delete(f"/v1/voices/{voice}")).status_code == 204


async def _restarted(server: ServeProcess, restarts_before: float) -> bool:
    """The engine was rebuilt once more (its voices given back) and serves again."""
    rebuilt = (await metrics(server)).get("voxgate_engine_restarts_total", 0) > restarts_before
    return rebuilt and await _ready(server)
