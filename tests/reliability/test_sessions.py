"""Many sessions at once, abrupt disconnects and a client that stops reading, against a real
server: each session completes or is refused (1013 / `overloaded`), none breaks or hangs;
whatever way a session ends, its KV pages and tasks are freed; memory stays bounded."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import websockets
from gateway_testkit import expect_close, send, start_session
from reliability_kit import SIZES, ServeProcess, engine_idle, metrics, refusals_between, until

SESSION_TIMEOUT_S = 300  # a hung session fails the test


async def one_session(server: ServeProcess) -> str:
    """A session that asks for one short response: 'completed', 'refused' (1013 at start) or
    'overloaded' (its response refused, the session usable). Anything else fails the test."""
    async with websockets.connect(server.ws + "/v1/stream", open_timeout=60) as ws:
        await send(ws, type="session.start")
        first = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if first["type"] == "error":
            assert first["code"] == "overloaded" and first["fatal"], first
            code, _ = await expect_close(ws)
            assert code == 1013
            return "refused"
        assert first["type"] == "session.started", first
        await send(ws, type="text", text="Hello there, how are you?")
        frames = 0
        while True:
            message = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(message, bytes):
                frames += 1
                continue
            event = json.loads(message)
            if event["type"] == "error":
                assert event["code"] == "overloaded" and not event["fatal"], event
            if event["type"] == "response.done":
                if event["status"] == "failed":
                    return "overloaded"
                assert event["status"] in ("completed", "length") and frames > 0, event
                return "completed"


async def test_many_sessions_each_complete_or_are_refused(tiny_server):
    server = tiny_server
    before = await metrics(server)
    rss_before = server.rss_mb()
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(one_session(server) for _ in range(SIZES.sessions))), SESSION_TIMEOUT_S
    )
    completed = outcomes.count("completed")
    refused = outcomes.count("refused") + outcomes.count("overloaded")
    late = await metrics(server)
    late_frames = late.get("voxgate_underruns_total", 0) - before.get("voxgate_underruns_total", 0)
    print(
        f"reliability: {SIZES.sessions} sessions: {completed} completed, {refused} refused, "
        f"{late_frames:.0f} late frames"
    )
    assert completed + refused == SIZES.sessions
    assert completed >= 1
    # More sessions than two cores carry in real time: admission turned some away.
    assert refused >= 1, outcomes
    # ... and those it let in played on time, but for the odd frame on a machine shared with
    # other jobs (admitted on the warm-up's figures alone, ~40 sessions came ~1,200 frames
    # late, ~28 each).
    assert late_frames <= 5 * completed, (late_frames, completed)
    after = await engine_idle(server)
    assert after["voxgate_sessions"] == 0
    # /metrics says why each was refused, once: a session refused at session.start under the
    # gateway's family, a response refused at submit under the engine's (read once idle: the
    # engine's figures come in stats snapshots).
    at_start = refusals_between(before, after, "voxgate_gateway_admission_refusals_total")
    at_submit = refusals_between(before, after, "voxgate_engine_admission_refusals_total")
    print(f"reliability: refused at session.start {at_start}, at submit {at_submit}")
    assert sum(at_start.values()) == outcomes.count("refused"), (at_start, outcomes)
    assert sum(at_submit.values()) == outcomes.count("overloaded"), (at_submit, outcomes)
    assert after["voxgate_event_loop_tasks"] <= before["voxgate_event_loop_tasks"]
    # Bounded: nothing per session is kept once it has ended.
    assert server.rss_mb() - rss_before < 20 + 0.2 * SIZES.sessions, server.rss_mb()
    assert server.alive


async def _abort_mid_generation(server: ServeProcess) -> None:
    ws = await websockets.connect(server.ws + "/v1/stream")
    await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 3000})
    await send(ws, type="text", text="Talk until I hang up.")
    while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
        pass
    ws.transport.abort()  # the network drops: no close frame


async def test_abrupt_disconnects_free_every_page_and_task(orpheus_server):
    server = orpheus_server
    before = await engine_idle(server)
    wave = 8
    for start in range(0, SIZES.disconnects, wave):
        count = min(wave, SIZES.disconnects - start)
        await asyncio.gather(*(_abort_mid_generation(server) for _ in range(count)))
    after = await engine_idle(server)
    assert after["voxgate_engine_kv_blocks_used"] == before["voxgate_engine_kv_blocks_used"] == 0
    assert after["voxgate_engine_kv_blocks_total"] == before["voxgate_engine_kv_blocks_total"]

    async def tasks_back():
        m = await metrics(server)
        return m["voxgate_sessions"] == 0 and (
            m["voxgate_event_loop_tasks"] <= before["voxgate_event_loop_tasks"]
        )

    await until(tasks_back, 30, "the sessions' tasks to end")
    closed = after['voxgate_sessions_closed_total{code="disconnect"}'] - before.get(
        'voxgate_sessions_closed_total{code="disconnect"}', 0
    )
    assert closed >= SIZES.disconnects


async def test_a_client_that_stops_reading_is_dropped_with_bounded_memory(tiny_server):
    """--max-send-queue-ms 1000 (conftest): once a second of audio waits unread (beyond what
    the kernel's socket buffers took), the session is closed with 1008 and its request freed;
    the server holds no more than that. voxgate-tiny generates faster than real time, so the
    pacer, not the model, sets the pace at which unread audio piles up.

    The kernel's buffers are kept small, so that it is the server's queue that fills: a small
    receive window, and a small maximum segment, which the server's socket sizes its send
    buffer by (Linux: a multiple of the segment). With loopback's 64-kB segments that buffer
    took ~3 MB, 30 s of this audio, before the server's queue held any of it."""
    server = tiny_server
    await engine_idle(server)
    rss_before = server.rss_mb()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Both before connect: the window and the segment size are offered in the handshake.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1024)
    sock.connect(("127.0.0.1", server.port))
    sock.setblocking(False)
    async with websockets.connect(server.ws + "/v1/stream", sock=sock, max_queue=1) as ws:
        await start_session(
            ws,
            sampling={"min_tokens": 1000, "max_tokens": 1200},  # 40 s of speech at least
            output_audio={"format": "pcm16", "sample_rate": 48000},  # 96 kB a second
        )
        await send(ws, type="text", text="Read me if you can, but you will not.")
        t0 = time.monotonic()

        async def dropped():
            m = await metrics(server)
            return m.get("voxgate_slow_client_closes_total", 0) >= 1

        await until(dropped, 60, "the slow client to be dropped")
        freed = await engine_idle(server)
        dropped_after = time.monotonic() - t0
        peak = server.rss_mb()
        code, _ = await expect_close(ws, timeout=30)
    assert code == 1008
    assert dropped_after < 40  # before the response could have played out
    assert freed["voxgate_engine_kv_blocks_used"] == 0
    assert peak - rss_before < 50, (rss_before, peak)
