"""A `response.cancel` that comes right behind the request that opened the response (sent in
the same breath, before the gateway's player has taken the response up): the client still gets
the response's `response.started` and its `response.done` `cancelled`, on `/v1/stream`, on
`/v1/realtime` and through the Python client."""

from __future__ import annotations

import asyncio
import json

import websockets
from gateway_testkit import recv_json, start_session, wait_engine_idle

from voxgate.client import connect

LONG_TEXT = "This is a long sentence that should take a while to say, and then some more."


async def send_together(ws, *events: dict) -> None:
    """Send the events back to back, with no wait between them."""
    for event in events:
        await ws.send(json.dumps(event))


async def json_events_until_done(ws, timeout: float = 10) -> list[dict]:
    """The JSON events up to and including the first `response.done` (audio frames skipped)."""
    events = []
    while not events or events[-1]["type"] != "response.done":
        message = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(message, str):
            events.append(json.loads(message))
    return events


async def test_stream_cancel_at_once_gets_started_and_done_cancelled(server, engine):
    async with websockets.connect(server.url) as ws:
        await start_session(ws)
        await send_together(ws, {"type": "text", "text": LONG_TEXT}, {"type": "response.cancel"})
        started, done = await json_events_until_done(ws)
        assert started["type"] == "response.started"
        assert done["response_id"] == started["response_id"]
        assert done["status"] == "cancelled"
        await wait_engine_idle(engine)


async def test_stream_cancel_at_once_drops_the_queued_responses_silently(server, engine):
    async with websockets.connect(server.url) as ws:
        await start_session(ws)
        await send_together(
            ws,
            {"type": "text", "text": LONG_TEXT},
            {"type": "text", "text": "A second response, queued behind the first."},
            {"type": "response.cancel"},
        )
        started, done = await json_events_until_done(ws)
        assert (started["type"], done["status"]) == ("response.started", "cancelled")
        # The queued one never got a `response.started`, so nothing more is said of it; the
        # session goes on with the next text.
        await send_together(ws, {"type": "text", "text": "Hello again."})
        started_next = await recv_json(ws)
        assert started_next["type"] == "response.started"
        assert started_next["response_id"] != started["response_id"]
        await wait_engine_idle(engine)


async def test_realtime_cancel_at_once_gets_created_and_done_cancelled(server, engine):
    url = server.url.removesuffix("/stream") + "/realtime?model=tiny-orpheus"
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": LONG_TEXT}],
    }
    async with websockets.connect(url) as ws:
        assert (await recv_json(ws))["type"] == "session.created"
        await send_together(
            ws,
            {"type": "conversation.item.create", "event_id": "ci", "item": item},
            {"type": "response.create", "event_id": "rc"},
            {"type": "response.cancel", "event_id": "cx"},
        )
        kinds, done = [], None
        while done is None:
            event = await recv_json(ws, timeout=10)
            kinds.append(event["type"])
            if event["type"] == "response.done":
                done = event
        assert "response.created" in kinds, kinds
        assert kinds.index("response.created") < kinds.index("response.done")
        assert done["response"]["status"] == "cancelled"
        await wait_engine_idle(engine)


async def test_python_client_cancel_at_once_ends_the_reply_cancelled(server, engine):
    async with connect(server.url) as session:
        await session.send_text(LONG_TEXT)
        await session.cancel()
        reply = await asyncio.wait_for(session.next_reply().collect(), 10)
        assert reply.status == "cancelled"
    await wait_engine_idle(engine)
