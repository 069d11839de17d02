"""User turns held for the client's `response.create`, in a turn-based conversation's history.

Turn detection's `create_response` false (the Realtime API's; its manual turns, which a commit
ends, too) holds each finished user turn: it joins the history at once, with no reply after
it, until the client asks for one (gateway.wire's AnswerTurns). The model's chat format wants
user and assistant turns to alternate, so whatever joins the history next keeps it so: another
user turn (held or answered, spoken or typed, a tool's results) is preceded by an empty reply,
and the next reply answers every held turn at once; a reply, or a client's call (the model's
own turn), simply follows them.

`HeldTurns` keeps that one fact — whether the history ends with held turns no reply follows
yet — and makes the empty reply when it is due. gateway.turns decides which turns are held and
runs the replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.api import EngineClient, HeardReply
from gateway.protocol import ErrorCode, ErrorEvent
from gateway.turn_history import TurnHistory
from gateway.turn_input import UserAudioTurn


@dataclass(frozen=True)
class HeldTurn:
    """A user turn ended while `create_response` is false: it joins the history with no
    reply, until the client asks for one (AnswerTurns)."""

    turn: UserAudioTurn


class HeldTurns:
    def __init__(self, engine: EngineClient, history: TurnHistory) -> None:
        self._engine = engine
        self._history = history  # the conversation's own, appended to here
        self._waiting = False  # the history ends with held user turns no reply follows yet

    @property
    def waiting(self) -> bool:
        """Whether held user turns wait for a reply (what AnswerTurns answers)."""
        return self._waiting

    async def hold(self, user: Any, turn_id: str | None) -> None:
        """A held user turn (the model's turn object) joins the history, with no reply."""
        await self.close()
        self._history.append(user, turn_id)
        self._waiting = True

    async def close(self) -> None:
        """Another user turn is about to join the history: held turns still unanswered are
        followed by an empty reply first, so that the history alternates."""
        if self._waiting:
            self._history.append(await self._engine.prepare_turn(HeardReply((), 0.0)))
            self._waiting = False

    def answered(self) -> None:
        """The model's turn (a reply, a client's call) joined the history after them."""
        self._waiting = False

    @staticmethod
    def nothing_waiting(event_id: str | None = None) -> ErrorEvent:
        """The client asked for the reply to held turns while none waits (`event_id`: the
        asking event's, where the client's protocol names it)."""
        return ErrorEvent(
            ErrorCode.BAD_FIELD,
            "nothing to answer: no user turn is waiting for a response (none was committed "
            "since the last response, or a held turn was refused: see the error before); "
            "speak or commit the input audio, or add a text message, then ask for the response",
            event_id=event_id,
        )
