"""Pacing and backpressure over a real socket: audio never runs more than the lead ahead of real
time, and a client that stops reading is closed with 1008 and its engine work freed."""

from __future__ import annotations

import asyncio
import socket
import time

import websockets
from gateway_testkit import (
    expect_close,
    recv_json,
    send,
    start_server,
    start_session,
    wait_engine_idle,
)


async def test_frames_are_paced_to_the_lead(make_server, engine):
    lead_ms = 100
    srv = make_server(lead_ms=lead_ms)
    async with websockets.connect(srv.url) as ws:
        await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 150})  # ~1.8 s
        await send(ws, type="text", text="Paced audio, please.")
        assert (await recv_json(ws))["type"] == "response.started"
        arrivals = []
        while isinstance(await asyncio.wait_for(ws.recv(), 30), bytes):
            arrivals.append(time.monotonic())
    # Frame i holds audio [20 i, 20 i + 20) ms; it may leave once playback (which starts with the
    # first frame) is within the lead of it. 30 ms of slack for scheduling on a busy machine.
    t0 = arrivals[0]
    for i, t in enumerate(arrivals):
        assert t - t0 >= (20 * i - lead_ms) / 1000 - 0.03, (i, t - t0)
    assert len(arrivals) * 20 > 1000  # long enough for pacing to matter


async def test_client_that_stops_reading_is_closed_and_freed():
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.config import GatewaySettings

    # The tiny model writes 18 s of audio in about 2 s; an engine that lets a stream run at most
    # 2 s ahead of its listener needs ~16 s for it, so only the close can free it sooner.
    engine = build_engine(
        "tiny-orpheus",
        config=EngineConfig(kv_cache_mb=64, realtime_admission=False, max_lead_s=2.0),
    )
    settings = GatewaySettings(model="tiny-orpheus", lead_ms=200, max_send_queue_ms=500)
    srv = start_server(settings, engine, sndbuf=8192)
    metrics = srv.app.state.gateway.metrics
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, before connect
        sock.connect(("127.0.0.1", int(srv.http.rsplit(":", 1)[1])))
        sock.setblocking(False)
        async with websockets.connect(srv.url, sock=sock, max_queue=1) as ws:
            # pcm16 at 48 kHz is 96 kB per second of audio: the buffers fill within a second.
            await start_session(
                ws,
                # ~18 s of audio; min_tokens: it cannot end early on a stop token
                sampling={"temperature": 0.0, "max_tokens": 1500, "min_tokens": 1500},
                output_audio={"format": "pcm16", "sample_rate": 48000},
            )
            await send(ws, type="text", text="Read me if you can, but you will not.")
            await asyncio.sleep(0.3)
            assert engine.stats().kv_blocks_used > 0
            # Not reading from here on: the server must notice, close, and free the KV pages
            # long before the request could have run to its end.
            t0 = time.monotonic()
            await wait_engine_idle(engine, timeout=20)
            freed_after = time.monotonic() - t0
            said = metrics.render().decode()
            assert "voxgate_slow_client_closes_total 1.0" in said, (
                f"freed after {freed_after:.1f} s without a slow-client close"
            )
            code, messages = await expect_close(ws, timeout=10)  # reading drains to the close
        assert code == 1008
        assert freed_after < 6, freed_after
        assert not any(isinstance(m, dict) and m["type"] == "response.done" for m in messages)
    finally:
        srv.stop()
        await engine.shutdown()
