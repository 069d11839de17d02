"""Sessions refused before they reach the engine, counted by cause on /metrics
(`voxgate_gateway_admission_refusals_total`, gateway/admission.py), against a real server and a
real engine with real-time admission on: a refusal is counted once, under the cause the engine's
stats gave, and never again in the engine's own family (requests refused at submit)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets
from gateway_testkit import expect_close, recv_json, send, start_server, start_session

ENGINE = "voxgate_engine_admission_refusals_total"
GATEWAY = "voxgate_gateway_admission_refusals_total"


@pytest.fixture(scope="module")
def admitting_engine():
    """tiny-orpheus with real-time admission on (the default), its turn cost set as a warm-up
    measures it on a machine that cannot carry two streams in real time (this one measures
    ~50 ms a token for 12 ms of audio: set, so the verdict does not hang on the machine), its
    KV pages unpriced so that streams are judged by their count (priced, the outlook would
    also weigh what the speaking stream has banked against its predicted length)."""
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine("tiny-orpheus", config=EngineConfig(kv_cache_mb=8, max_num_seqs=4))
    eng.core.scheduler.admission.capacity.price_pages(0.0)
    spt = eng.facts.seconds_per_token
    for rows in range(1, 5):
        eng.core.scheduler.admission.capacity.steps.seed(rows, 2 * spt * rows)
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def admitting_server(admitting_engine):
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-orpheus"), admitting_engine)
    yield server
    server.stop()


def refusals(server) -> dict[str, dict[str, float]]:
    """/metrics' refusal counters: {family: {cause: count}}."""
    text = httpx.get(f"{server.http}/metrics", timeout=10).text
    found: dict[str, dict[str, float]] = {ENGINE: {}, GATEWAY: {}}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        family, _, labels = name.partition("{cause=")
        if family in found and labels:
            found[family][labels[:-1].strip('"')] = float(value)
    return found


def added(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {c: n - before.get(c, 0.0) for c, n in after.items() if n != before.get(c, 0.0)}


async def test_a_session_refused_at_start_is_counted_under_the_engines_realtime_cause(
    admitting_server, admitting_engine
):
    server = admitting_server
    async with websockets.connect(server.url) as speaking:
        # One stream is always admitted; while it plays, a second would fall behind.
        await start_session(speaking, sampling={"temperature": 0.0, "max_tokens": 3000})
        await send(speaking, type="text", text="Keep talking while the others are turned away.")
        assert (await recv_json(speaking))["type"] == "response.started"
        assert isinstance(await asyncio.wait_for(speaking.recv(), 60), bytes)
        stats = admitting_engine.stats()
        assert not stats.realtime_room and stats.realtime_refusal == "turn_cost", stats
        before = refusals(server)

        async with websockets.connect(server.url) as refused:
            await send(refused, type="session.start")
            code, messages = await expect_close(refused)
        assert code == 1013 and messages[0]["code"] == "overloaded" and messages[0]["fatal"]
        assert "real-time capacity" in messages[0]["message"], messages[0]
        # The HTTP speech route asks the same check, and counts in the same family.
        voice = admitting_engine.facts.default_voice
        body = {"model": "tiny-orpheus", "input": "Hello.", "voice": voice}
        response = httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=30)
        assert response.status_code == 503, response.text

        after = refusals(server)
        assert added(before[GATEWAY], after[GATEWAY]) == {"turn_cost": 2}
        assert added(before[ENGINE], after[ENGINE]) == {}  # nothing reached the engine
        await send(speaking, type="response.cancel")


async def test_a_session_over_the_servers_cap_is_counted_as_max_sessions(admitting_engine):
    from gateway.config import GatewaySettings

    capped = start_server(GatewaySettings(model="tiny-orpheus", max_sessions=1), admitting_engine)
    # The engine is shared with the test before, whose stream may still be ending after its
    # cancel (on a loaded machine): until it has, real-time admission has no room for even
    # the first session here.
    for _ in range(300):
        if admitting_engine.stats().realtime_room:
            break
        await asyncio.sleep(0.1)
    try:
        before = refusals(capped)
        async with websockets.connect(capped.url) as first:
            await start_session(first)
            async with websockets.connect(capped.url) as second:  # refused once accepted
                code, messages = await expect_close(second)
        assert code == 1013 and messages[0]["code"] == "overloaded"
        after = refusals(capped)
        assert added(before[GATEWAY], after[GATEWAY]) == {"max_sessions": 1}
        assert added(before[ENGINE], after[ENGINE]) == {}
    finally:
        capped.stop()
