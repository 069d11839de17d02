"""A speculative reply to a turn-based session's user: begun when the user's speech pauses
(`--speculative-turn-ms` of silence), before the VAD's longer silence says the turn has ended,
and held back until it does.

A reply's first audio waits for the model's work on the turn (its speech tokenizer or audio
encoder, the prefill, the first chunk's tokens and their decode): a few hundred milliseconds
that, without speculation, only begin once the end of turn is confirmed. Begun at the pause,
they overlap the rest of the silence. Nothing of the reply reaches the client while it is
speculative: its events and audio are held here, and go out in order, after
`input.speech_stopped`, when the turn is confirmed (`confirm`). If the user speaks again first,
the reply is cancelled and all it made is dropped (`discard`): the turn goes on, and neither
the turn nor the reply joins the conversation's history (the engine's kept KV is matched by
prefix, so the next reply recomputes from where they began).
"""

from __future__ import annotations

import asyncio
import enum
import time

from gateway.reply import Emitter
from gateway.turn_input import UserAudioTurn


class Decision(enum.Enum):
    PENDING = enum.auto()  # the turn may still go on
    CONFIRMED = enum.auto()  # the turn ended: the reply is the user's answer
    DISCARDED = enum.auto()  # the user spoke again: the reply is dropped
    UNPREPARED = (
        enum.auto()
    )  # the model refused the turn so far: the confirmed turn is answered anew


class SpeculativeTurn:
    def __init__(self, turn: UserAudioTurn, emit: Emitter, confirm_in_s: float) -> None:
        self.turn = turn
        # When the turn's end would be confirmed if the user stays silent (monotonic time):
        # nothing of the reply can be heard before then, and the engine is told so
        # (SpeechRequest.audible_after_s), so it does not rank the reply ahead of those
        # awaited now.
        self.confirm_due = time.monotonic() + confirm_in_s
        self._emit = emit
        self._held: list[tuple[bool, tuple]] = []  # (is audio, arguments), in order
        self.decision = Decision.PENDING
        self.decided = asyncio.Event()  # set once confirmed or discarded
        self.reply = None  # the TurnReply answering it, once begun (gateway/turn_reply.py)
        self.turn_id = ""  # the committed turn's id, once confirmed
        self.emitter = Emitter(
            event=lambda event: self._out(False, (event,)),
            audio=lambda frame, ms: self._out(True, (frame, ms)),
            overloaded=emit.overloaded,
        )

    @property
    def pending(self) -> bool:
        return self.decision is Decision.PENDING

    def confirm(self, turn_id: str) -> None:
        """The turn ended (committed as `turn_id`): what the reply made so far goes out, in
        order; the rest as it comes."""
        if not self.pending:
            return
        self.turn_id = turn_id
        self.decision = Decision.CONFIRMED
        held, self._held = self._held, []
        for is_audio, args in held:
            (self._emit.audio if is_audio else self._emit.event)(*args)
        self.decided.set()

    def discard(self) -> None:
        """The user spoke again: the reply stops and nothing it made is sent."""
        if not self.pending:
            return
        self.decision = Decision.DISCARDED
        self._held.clear()
        if self.reply is not None:
            self.reply.cancel()
        self.decided.set()

    def unprepared(self) -> None:
        """The model refused the turn so far (too short, say): no reply was begun, and the turn
        is answered as any other once it ends."""
        if self.pending:
            self.decision = Decision.UNPREPARED
            self.decided.set()

    def _out(self, is_audio: bool, args: tuple) -> None:
        if self.decision is Decision.CONFIRMED:
            (self._emit.audio if is_audio else self._emit.event)(*args)
        elif self.pending:
            self._held.append((is_audio, args))
