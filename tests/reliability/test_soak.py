"""The soak: steady load at 70 % of the capacity real-time admission grants, for
VOXGATE_SOAK_S seconds (skipped unless set), with memory and latency flat from the first
quarter to the last:

    VOXGATE_SOAK_S=1800 pytest tests/reliability/test_soak.py     # the documented 30 minutes

Capacity is found first: sessions are opened one after another, each speaking in a loop,
until the server refuses one (1013); 70 % of the streams it held then run for the soak."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time

import pytest
import websockets
from gateway_testkit import send
from reliability_kit import ServeProcess, engine_idle, metrics, refusals_by_cause

SOAK_S = float(os.environ.get("VOXGATE_SOAK_S", "0"))
TEXT = "The quick brown fox jumps over the lazy dog."

pytestmark = [
    pytest.mark.skipif(SOAK_S <= 0, reason="the soak runs with VOXGATE_SOAK_S=<seconds>"),
    # The capacity probe (up to a few minutes) and the soak itself, past the suite's timeout.
    pytest.mark.timeout(SOAK_S + 900),
]


async def _speaker(server: ServeProcess, stop: asyncio.Event, ttfa: list, refusals: list) -> None:
    """One session speaking responses back to back until `stop`; each response's time to
    first audio (client clock) goes to `ttfa` as (when, seconds)."""
    async with websockets.connect(server.ws + "/v1/stream") as ws:
        await send(ws, type="session.start")
        started = json.loads(await ws.recv())
        if started["type"] != "session.started":
            refusals.append(started)
            return
        while not stop.is_set():
            t0 = time.monotonic()
            await send(ws, type="text", text=TEXT)
            first = None
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    first = first or time.monotonic() - t0
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    # The engine measured less room than it had granted (live steps refine
                    # the calibration): this response is refused, the session goes on.
                    assert event["code"] == "overloaded" and not event["fatal"], event
                    refusals.append(event)
                elif event["type"] == "response.done":
                    assert event["status"] in ("completed", "length", "failed"), event
                    break
            if first is not None:
                ttfa.append((time.monotonic(), first))
            else:
                await asyncio.sleep(1.0)  # refused: a client backs off before it asks again


async def _capacity(server: ServeProcess) -> int:
    stop, ttfa, refusals, tasks = asyncio.Event(), [], [], []
    while not refusals and len(tasks) < 500:
        tasks.append(asyncio.create_task(_speaker(server, stop, ttfa, refusals)))
        await asyncio.sleep(1.0)  # let it reach a steady cadence before the next
    stop.set()
    await asyncio.gather(*tasks)
    return len(tasks) - 1  # the last one opened was refused


async def _refusal_causes(server: ServeProcess) -> dict[str, float]:
    """Admission's refusals so far, by cause (turn_cost, codec, slow_start, …): the engine's at
    submit and the gateway's at session.start, each refusal in one of them."""
    values = await metrics(server)
    found: dict[str, float] = {}
    for family in (
        "voxgate_engine_admission_refusals_total",
        "voxgate_gateway_admission_refusals_total",
    ):
        for cause, count in refusals_by_cause(values, family).items():
            found[cause] = found.get(cause, 0) + count
    return found


async def test_soak_at_70_percent_of_capacity_stays_flat(tiny_server):
    server = tiny_server
    capacity = await _capacity(server)
    streams = max(1, int(0.7 * capacity))
    await engine_idle(server)
    before = await _refusal_causes(server)
    stop, ttfa, refusals = asyncio.Event(), [], []
    rss: list[tuple[float, float]] = []
    tasks = [asyncio.create_task(_speaker(server, stop, ttfa, refusals)) for _ in range(streams)]
    start = time.monotonic()
    while time.monotonic() - start < SOAK_S:
        await asyncio.sleep(min(10.0, SOAK_S / 20))
        rss.append((time.monotonic(), server.rss_mb()))
    stop.set()
    await asyncio.gather(*tasks)
    after = await _refusal_causes(server)
    causes = {cause: after[cause] - before.get(cause, 0) for cause in after}
    print(f"soak: capacity {capacity}; refusals by cause during the soak: {causes}")
    # 70 % of what was granted stays granted, but for the odd response while live steps
    # refine the calibration.
    assert len(refusals) <= 0.05 * max(len(ttfa), 1), refusals[:3]
    quarter = SOAK_S / 4
    early = [s for t, s in ttfa if t - start < quarter]
    late = [s for t, s in ttfa if t - start > SOAK_S - quarter]
    mem_early = [m for t, m in rss if t - start < quarter] or [rss[0][1]]
    mem_late = [m for t, m in rss if t - start > SOAK_S - quarter] or [rss[-1][1]]
    print(
        f"soak: {streams} streams, {len(ttfa)} responses, rss {mem_early[0]:.0f} -> "
        f"{mem_late[-1]:.0f} MB, ttfa median {statistics.median(early):.3f} -> "
        f"{statistics.median(late):.3f} s"
    )
    assert max(mem_late) < max(mem_early) * 1.1 + 20  # flat: no growth beyond noise
    assert statistics.median(late) < 1.5 * statistics.median(early) + 0.05
