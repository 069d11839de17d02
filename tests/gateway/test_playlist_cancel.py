"""ResponseQueue.cancel before the player has played the response the client opened: the
client still gets that response's `response.started` and `response.done` `cancelled`,
whichever step of taking it up the player is at; the responses queued behind it are dropped
without a word (they never started). No engine request is made for any of them."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from engine.api import EngineStats, StepTiming
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.playlist import ResponseQueue
from gateway.protocol import ResponseDone, ResponseStarted, ResponseStatus, TextInput
from gateway.reply import Emitter


class NoEngine:
    """An engine that is ready but must never be asked for speech."""

    facts = SimpleNamespace(appends_text=False, sample_rate=24000)
    ready = True

    def submit(self, request):
        raise AssertionError(f"a cancelled response made an engine request: {request}")

    def cancel(self, request_id: str) -> None:
        raise AssertionError(f"nothing to cancel: {request_id}")


def no_encoder(spec, source_rate):
    raise AssertionError("a cancelled response opened an output encoder")


def new_queue(events: list) -> ResponseQueue:
    stats = EngineStats(0, 0, 100, 0, 0, StepTiming(), True)
    return ResponseQueue(
        NoEngine(),
        GatewaySettings(model="tiny-orpheus"),
        Emitter(events.append, lambda frame, ms: None),
        GatewayMetrics(lambda: stats),
        no_encoder,
        logging.LoggerAdapter(logging.getLogger("test_playlist_cancel"), {}),
    )


def assert_started_then_cancelled(events: list) -> None:
    assert [type(e) for e in events] == [ResponseStarted, ResponseDone], events
    started, done = events
    assert done.response_id == started.response_id
    assert done.status is ResponseStatus.CANCELLED


async def test_cancel_before_the_player_takes_the_response_up():
    events: list = []
    queue = new_queue(events)
    player = asyncio.create_task(queue.play())
    await asyncio.sleep(0)  # the player waits for a response
    queue.add_text(TextInput("The first response.", final=True))
    queue.add_text(TextInput("A second, queued behind it.", final=True))
    await queue.cancel()  # before the player has woken to take the first up
    assert_started_then_cancelled(events)
    assert not queue.busy
    player.cancel()
    await asyncio.gather(player, return_exceptions=True)


async def test_cancel_after_the_player_took_it_up_but_before_it_ran():
    events: list = []
    queue = new_queue(events)
    player = asyncio.create_task(queue.play())
    queue.add_text(TextInput("The first response.", final=True))
    queue.add_text(TextInput("A second, queued behind it.", final=True))
    while queue._runner is None:  # the player has taken it up: its runner's task is made
        await asyncio.sleep(0)
    assert events == []  # its run has not begun: no `response.started` yet
    await queue.cancel()
    assert_started_then_cancelled(events)
    await asyncio.sleep(0.05)  # the dropped second response must not start
    assert len(events) == 2 and not queue.busy
    player.cancel()
    await asyncio.gather(player, return_exceptions=True)
