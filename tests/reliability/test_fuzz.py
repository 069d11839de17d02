"""Fuzzed frames (fuzz_frames.py) over many sessions of every endpoint: the server never
crashes, each frame gets its documented error (or close), and a session speaking beside the
fuzzed ones is unaffected."""

from __future__ import annotations

import asyncio
import json
import random

import websockets
from fuzz_frames import Fuzz, native_frame, oversized, realtime_frame, twilio_frame
from gateway_testkit import collect_response, expect_close, send, start_session
from reliability_kit import SIZES, ServeProcess, engine_idle, metrics, probe

MAX_FRAME_BYTES = 16384  # GatewaySettings.max_frame_bytes
MAX_MESSAGE_BYTES = 262144  # --max-message-bytes
BATCH = 50  # frames in flight before their answers are read
SID = "MZfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzz"


async def _send(ws, fuzz: Fuzz) -> None:
    await ws.send(fuzz.text if fuzz.text is not None else fuzz.data)


async def _answers(ws, sent: list[Fuzz], seed: int) -> None:
    for i, fuzz in enumerate(sent):
        message = await asyncio.wait_for(ws.recv(), 30)
        event = json.loads(message)
        where = f"seed {seed}, frame {i} ({fuzz.kind}: {str(fuzz.text or fuzz.data)[:80]!r})"
        assert event["type"] == "error", (where, event)
        code = event["code"] if "code" in event else event["error"]["code"]
        assert code in fuzz.codes, (where, event)
        assert not event.get("fatal", False), (where, event)


async def fuzz_native(server: ServeProcess, seed: int, frames: int) -> int:
    rng = random.Random(seed)
    async with websockets.connect(server.ws + "/v1/stream", max_size=None) as ws:
        await start_session(ws)
        sent_total = 0
        while sent_total < frames:
            batch = [
                native_frame(rng, MAX_FRAME_BYTES) for _ in range(min(BATCH, frames - sent_total))
            ]
            for fuzz in batch:
                await _send(ws, fuzz)
            await _answers(ws, batch, seed)
            sent_total += len(batch)
        # The one fatal frame: too_large, then close 1009.
        await _send(ws, oversized(MAX_MESSAGE_BYTES))
        code, messages = await expect_close(ws)
    assert code == 1009 and messages[-1]["code"] == "too_large" and messages[-1]["fatal"]
    return sent_total + 1


async def fuzz_realtime(server: ServeProcess, seed: int, frames: int) -> int:
    rng = random.Random(seed)
    async with websockets.connect(server.ws + "/v1/realtime?model=tiny-orpheus") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        sent_total = 0
        while sent_total < frames:
            batch = [realtime_frame(rng) for _ in range(min(BATCH, frames - sent_total))]
            for fuzz in batch:
                await _send(ws, fuzz)
            await _answers(ws, batch, seed)
            sent_total += len(batch)
    return sent_total


async def fuzz_twilio(server: ServeProcess, seed: int, frames: int) -> int:
    """Twilio gets no error message: each frame must show in voxgate_errors_total instead,
    and the stream must stay open (a `stop` then ends it normally)."""
    rng = random.Random(seed)
    async with websockets.connect(server.ws + "/v1/twilio") as ws:
        start = {
            "streamSid": SID,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {},
        }
        await ws.send(json.dumps({"event": "start", "streamSid": SID, "start": start}))
        for _ in range(frames):
            await _send(ws, twilio_frame(rng, SID))
        await ws.send(json.dumps({"event": "stop", "streamSid": SID, "stop": {}}))
        code, messages = await expect_close(ws, timeout=30)
    assert code == 1000 and messages == []
    return frames


def _errors(values: dict[str, float]) -> float:
    return sum(v for k, v in values.items() if k.startswith("voxgate_errors_total{"))


async def test_fuzzed_frames_on_every_endpoint(orpheus_server):
    server = orpheus_server
    per_session = SIZES.fuzz_frames // SIZES.fuzz_sessions
    before = await metrics(server)

    async def bystander():
        async with websockets.connect(server.ws + "/v1/stream") as ws:
            await start_session(ws)
            await send(ws, type="text", text="Nothing disturbs me.")
            return await collect_response(ws, timeout=120)

    speaking = asyncio.create_task(bystander())
    native = await asyncio.gather(
        *(fuzz_native(server, seed, per_session) for seed in range(SIZES.fuzz_sessions))
    )
    played = await speaking
    assert played.done["status"] == "length" and played.frames
    quarter = max(1, SIZES.fuzz_sessions // 4)
    realtime = await asyncio.gather(
        *(fuzz_realtime(server, 1000 + s, per_session) for s in range(quarter))
    )
    counted = await metrics(server)
    twilio = await asyncio.gather(
        *(fuzz_twilio(server, 2000 + s, per_session) for s in range(quarter))
    )
    after = await metrics(server)
    assert _errors(after) - _errors(counted) == sum(twilio)  # each Twilio frame was counted
    total = sum(native) + sum(realtime) + sum(twilio)
    print(f"reliability: {total} fuzzed frames over {len(native + realtime + twilio)} sessions")
    assert total >= SIZES.fuzz_frames * 1.4
    assert server.alive and await probe(server, "/health") == 200
    idle = await engine_idle(server)
    assert idle["voxgate_sessions"] == 0
    assert idle["voxgate_event_loop_tasks"] <= before["voxgate_event_loop_tasks"]
