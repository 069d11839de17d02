"""Full-duplex clients for the gateway tests: Opus microphones streamed in real time, Moshi's
audio and transcript read back (tests/gateway/test_duplex_stream.py,
tests/gateway/test_duplex_mic_decoding.py)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import websockets
from gateway_testkit import expect_close, send, start_session

from gateway.audio import make_encoder
from gateway.protocol import AudioSpec

# Four seconds of talk: 50 Moshi frames each way, every packet paced in real time; enough for
# Moshi's text stream and the frame accounting, and more than the longest slice a test sends.
SECONDS = 4.0
PACKET_MS = 20
FRAME_MS = 80  # one Moshi frame
SESSIONS = 3


def microphone_packets(seed: int) -> list[bytes]:
    """SECONDS of a wobbling tone as a browser would send it: 20 ms Opus packets at 48 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(SECONDS * 24000)) / 24000
    pcm = 0.3 * np.sin(2 * np.pi * rng.uniform(120, 300) * t) * (0.6 + 0.4 * np.sin(5 * t))
    encoder = make_encoder(AudioSpec(), 24000)
    return encoder.encode(pcm.astype(np.float32)) + encoder.flush()


async def converse(url: str, seed: int) -> dict:
    packets = microphone_packets(seed)
    async with websockets.connect(url, subprotocols=["voxgate.v1"], max_size=None) as ws:
        started = await start_session(ws, sampling={"temperature": 0.0})
        assert started["model_kind"] == "full_duplex"  # the page converses by microphone only
        received = {"frames": 0, "text": [], "events": []}

        async def speak():
            start = time.monotonic()
            for i, packet in enumerate(packets):  # real time: packet i leaves at i · 20 ms
                await asyncio.sleep(max(0.0, start + i * PACKET_MS / 1000 - time.monotonic()))
                await ws.send(packet)
            await asyncio.sleep(0.3)  # the last frames reach the engine
            await send(ws, type="session.end")

        async def listen():
            async for message in ws:
                if isinstance(message, bytes):
                    received["frames"] += 1
                    continue
                event = json.loads(message)
                received["events"].append(event)
                if event["type"] == "transcript.delta":
                    received["text"].append(event["text"])
                if event["type"] == "session.ended":
                    return

        await asyncio.gather(speak(), listen())
        code, _ = await expect_close(ws)
        received["close"] = code
        received["packets_sent"] = len(packets)
        return received
