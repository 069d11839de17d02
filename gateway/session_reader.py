"""Reading one session's client frames: the next ASGI message before the session's deadline
(session.start within start_timeout_s of opening; afterwards idle_timeout_s of quiet, where
audio still playing is not quiet), and each frame checked against the size limit and decoded
by the session's wire. The session (gateway/session.py) acts on what comes back."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Sequence

from starlette.types import Message
from starlette.websockets import WebSocket

from gateway.config import GatewaySettings
from gateway.protocol import ErrorCode, ProtocolError
from gateway.wire import Wire, WireInput


class Silence(enum.Enum):
    """Why no message came: the client never started the session, or it went idle."""

    NOT_STARTED = "not_started"
    IDLE = "idle"


class SessionReader:
    """One timer per session, not one per message: a full-duplex session's microphone sends 50
    frames a second, and a timer scheduled and cancelled around each receive (an
    `asyncio.timeout`) costs the event loop ~7 µs a frame, 4 % of its time at 128 such
    sessions. The timer fires at the earliest moment the session could be silent; then, if
    activity moved the deadline, it is set again for the new one, and only a deadline really
    passed interrupts the receive in progress (as asyncio.timeout would: by cancelling it)."""

    def __init__(self, ws: WebSocket, wire: Wire, settings: GatewaySettings) -> None:
        self._ws = ws
        self._wire = wire
        self._settings = settings
        self.opened_at = time.monotonic()
        self.last_activity = self.opened_at  # the last client message
        self._awaiting_start: Callable[[], bool] = lambda: True
        self._idle_since: Callable[[], float] = lambda: self.last_activity
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0  # the deadline the timer is set for
        self._waiting: asyncio.Task | None = None  # the task inside ws.receive(), if any
        self._interrupted = False  # the timer cancelled that receive

    async def receive(
        self, awaiting_start: Callable[[], bool], idle_since: Callable[[], float]
    ) -> Message | Silence:
        """The next ASGI message, or the Silence that ends the session: `awaiting_start` says
        whether session.start is still due, `idle_since` when the session last did anything
        (now while it plays audio)."""
        self._awaiting_start, self._idle_since = awaiting_start, idle_since
        while True:
            deadline = self._deadline()
            if time.monotonic() >= deadline:
                return Silence.NOT_STARTED if self._awaiting_start() else Silence.IDLE
            if self._timer is None or deadline < self._armed_for:
                self._arm(deadline)  # none yet, or the deadline came nearer (session.start)
            task = asyncio.current_task()
            self._waiting = task
            try:
                message = await self._ws.receive()
            except asyncio.CancelledError:
                if self._interrupted and task is not None and task.uncancel() == 0:
                    self._interrupted = False
                    continue  # the deadline passed: the loop's check says which
                raise
            finally:
                self._waiting = None
            if message["type"] != "websocket.disconnect":
                self.last_activity = time.monotonic()
            return message

    def close(self) -> None:
        """The session is over: its timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline(self) -> float:
        if self._awaiting_start():
            return self.opened_at + self._settings.start_timeout_s
        return self._idle_since() + self._settings.idle_timeout_s

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, deadline - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
        self._armed_for = deadline

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self._deadline()
        if time.monotonic() < deadline:
            self._arm(deadline)  # activity moved the deadline on
        elif self._waiting is not None:
            self._interrupted = True
            self._waiting.cancel()
        # else the session is busy with a message: its next receive finds the deadline passed

    def decode(self, message: Message) -> Sequence[WireInput]:
        """The inputs a client frame carries; ProtocolError for one too large or malformed
        (too large: code TOO_LARGE, which the session closes with 1009)."""
        text, data = message.get("text"), message.get("bytes")
        size = len(data) if data is not None else len(text.encode()) if text is not None else 0
        if size > self._settings.max_message_bytes:
            limit = self._settings.max_message_bytes
            raise FrameTooLarge(f"frames are limited to {limit} bytes")
        if data is not None:
            return self._wire.decode_binary(data)
        return self._wire.decode_text(text or "")


class FrameTooLarge(ProtocolError):
    """A frame over max_message_bytes: always fatal (close 1009), even after session.start."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.TOO_LARGE, message)
