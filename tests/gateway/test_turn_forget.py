"""A turn taken out of a turn-based conversation (gateway.wire's ForgetTurn, the Realtime API's
conversation.item.delete) in each place it can be: in the history (erased in place, by the
model's own ErasedTurn), waiting in the queue (dropped unanswered), being prepared (refused
until its reply is done) or never kept (forgotten as it is). An engine that records the turn
commands stands in for the model; the TurnConversation is the real one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from engine.api import ErasedTurn, HeardReply, ModelInputError, TurnFromText
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.protocol import ErrorEvent, ProtocolError, TextInput
from gateway.reply import Emitter
from gateway.turns import TurnConversation
from gateway.wire import ForgetTurn, Truncate, TurnForgotten


class TurnEngine:
    """prepare_turn only: a typed turn waits for `release` (so one can be caught being
    prepared); an erased turn comes back marked."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.preparing = asyncio.Event()

    async def prepare_turn(self, command: object) -> object:
        if isinstance(command, TurnFromText):
            self.preparing.set()
            await self.release.wait()
            raise ModelInputError("stop here: no reply is needed")
        if isinstance(command, ErasedTurn):
            return ("erased", command.turn)
        assert isinstance(command, HeardReply)
        return ("reply", command.output_ids)


def conversation(engine: TurnEngine, events: list) -> TurnConversation:
    emit = Emitter(event=events.append, audio=lambda frame, ms: None)
    return TurnConversation(
        engine,
        "conv",
        GatewaySettings(),
        emit,
        GatewayMetrics(lambda: None),
        open_encoder=None,
        log=logging.getLogger("test"),
    )


def test_a_turn_in_the_history_is_erased_in_its_place():
    async def run() -> None:
        engine, events = TurnEngine(), []
        talk = conversation(engine, events)
        talk.history.append("user 1", "turn_1")
        await talk._keep_reply((7, 8), None, "resp_1")  # the newest reply: truncate takes it
        talk.history.append("user 2", "turn_2")
        await talk.handle(ForgetTurn("resp_1"))
        await talk.handle(ForgetTurn("turn_1"))
        assert list(talk.history) == [
            ("erased", "user 1"),
            ("erased", ("reply", (7, 8))),
            "user 2",
        ]
        assert events == [TurnForgotten("resp_1"), TurnForgotten("turn_1")]
        with pytest.raises(ProtocolError, match="nothing to truncate"):
            await talk.handle(Truncate(100))  # the erased reply has nothing left to cut
        await talk.handle(ForgetTurn("turn_9"))  # never kept (refused, say): forgotten as is
        assert events[-1] == TurnForgotten("turn_9") and len(talk.history) == 3

    asyncio.run(run())


def test_a_waiting_turn_is_dropped_and_one_being_prepared_is_refused():
    async def run() -> None:
        engine, events = TurnEngine(), []
        talk = conversation(engine, events)
        await talk.handle(TextInput("first", turn_id="turn_a"))
        await talk.handle(TextInput("second", turn_id="turn_b"))
        player = asyncio.create_task(talk.run())
        await engine.preparing.wait()  # "first" is being prepared, "second" waits
        with pytest.raises(ProtocolError, match="being answered") as refused:
            await talk.handle(ForgetTurn("turn_a"))
        assert refused.value.param == "item_id"
        await talk.handle(ForgetTurn("turn_b"))
        assert events == [TurnForgotten("turn_b")] and talk.busy
        engine.release.set()
        for _ in range(100):
            if not talk.busy:
                break
            await asyncio.sleep(0.01)
        assert not talk.busy  # "second" was dropped: nothing more to answer
        assert len(events) == 2 and isinstance(events[1], ErrorEvent)  # "first"'s refusal
        player.cancel()

    asyncio.run(run())
