"""gateway/held_turns.py without a model: user turns held for `response.create` join the
history at once, and the history keeps alternating user / assistant whatever comes next (an
empty reply before another user turn; nothing before the model's own turn). The same held
turns end to end, over the Realtime API: test_realtime_turn_responses.py."""

from __future__ import annotations

import asyncio

from engine.api import HeardReply
from gateway.held_turns import HeldTurns
from gateway.protocol import ErrorCode
from gateway.turn_history import TurnHistory


class Engine:
    """Makes the model's turn for an empty reply (what HeldTurns asks of the engine)."""

    def __init__(self) -> None:
        self.asked: list[object] = []

    async def prepare_turn(self, command: object) -> object:
        self.asked.append(command)
        return "empty reply"


def test_held_turns_keep_the_history_alternating():
    async def run() -> None:
        engine, history = Engine(), TurnHistory()
        history.append("user 1", "turn_1")
        history.append("reply 1", "resp_1")
        held = HeldTurns(engine, history)
        assert not held.waiting
        await held.close()  # nothing held: nothing to add
        assert list(history) == ["user 1", "reply 1"] and engine.asked == []

        await held.hold("user 2", "turn_2")
        assert held.waiting and history[-1] == "user 2"
        await held.hold("user 3", "turn_3")  # a second held turn: an empty reply between them
        assert history[2:] == ["user 2", "empty reply", "user 3"]
        assert history.index_of("turn_3") == 4 and history.index_of("turn_9") is None
        assert engine.asked == [HeardReply((), 0.0)]

        await held.close()  # another user turn comes (typed, say): the empty reply first
        assert history[-1] == "empty reply" and not held.waiting

        await held.hold("user 4", "turn_4")
        held.answered()  # the reply the client asked for follows it: nothing to add
        assert not held.waiting
        await held.close()
        assert history[-1] == "user 4" and len(engine.asked) == 2

    asyncio.run(run())


def test_asking_with_nothing_held_is_the_clients_error():
    error = HeldTurns.nothing_waiting()
    assert error.code is ErrorCode.BAD_FIELD and not error.fatal
    assert "no user turn is waiting for a response" in error.message
