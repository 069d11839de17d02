"""Helpers of the scale-out tests: live sessions, their outcome, the replicas' figures."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import websockets
from gateway_testkit import send, start_session
from reliability_kit import ServeProcess

LONG = {"temperature": 0.0, "max_tokens": 1500}  # a minute of audio: outlasts the test
LONG_TEXT = "Keep talking for a long while, please, and do not stop too soon. " * 6
REPLICAS = ("replica-0", "replica-1")
TWO_REPLICAS = ("--replicas", "2", "--replica-cpus", "1")  # one CPU core each
_READY_LINE = re.compile(r"engine replica (replica-\d) ready \(pid (\d+) on ")


@contextmanager
def serving(tmp_path_factory, name: str, *args: str) -> Iterator[ServeProcess]:
    """`voxgate serve ARGS` on the CPU, logged to a temporary NAME.log, stopped at the end.
    Real-time admission is off: on a shared CI core one stream is already slower than real
    time, and these tests need several live streams at once on each replica."""
    log = tmp_path_factory.mktemp("serve") / f"{name}.log"
    cpu = ("--device", "cpu", "--no-realtime-admission", "--kv-cache-mb", "32")
    server = ServeProcess(*args, *cpu, log=log)
    try:
        yield server
    finally:
        server.stop()


def replica_pid(server: ServeProcess, name: str) -> int:
    """The process of the replica serving as `name` now (its latest start in the log)."""
    pids = [int(pid) for n, pid in _READY_LINE.findall(server.log_text()) if n == name]
    assert pids, f"no start of {name} in the log"
    return pids[-1]


def per_replica(values: dict[str, float], metric: str) -> dict[str, float]:
    return {r: values.get(f'{metric}{{replica="{r}"}}', -1) for r in REPLICAS}


async def streaming_session(server: ServeProcess):
    """A native session mid-response (its first audio frame received)."""
    ws = await websockets.connect(server.ws + "/v1/stream", close_timeout=1)
    await start_session(ws, sampling=LONG)
    await send(ws, type="text", text=LONG_TEXT)
    while isinstance(message := await asyncio.wait_for(ws.recv(), 60), str):
        assert json.loads(message)["type"] != "error", message
    return ws


async def outcome(ws, seconds: float) -> tuple[str, float]:
    """Read for up to `seconds`: ("closed", code) if the server closed it, else
    ("streaming", audio frames received)."""
    frames = 0
    try:
        async with asyncio.timeout(seconds):
            async for message in ws:
                frames += isinstance(message, bytes)
    except TimeoutError:
        return "streaming", frames
    except websockets.ConnectionClosed:
        pass
    return "closed", ws.close_code


async def keep_reading(ws) -> None:
    """Read until the session closes, as a listener does: a session left unread is closed by
    the server as a slow client once its buffers fill."""
    try:
        async for _ in ws:
            pass
    except websockets.ConnectionClosed:
        pass


async def ready_body(server: ServeProcess) -> tuple[int, dict]:
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
        response = await client.get("/ready")
    return response.status_code, response.json()
