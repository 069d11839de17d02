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
    def __init__(self, ws: WebSocket, wire: Wire, settings: GatewaySettings) -> None:
        self._ws = ws
        self._wire = wire
        self._settings = settings
        self.opened_at = time.monotonic()
        self.last_activity = self.opened_at  # the last client message

    async def receive(
        self, awaiting_start: Callable[[], bool], idle_since: Callable[[], float]
    ) -> Message | Silence:
        """The next ASGI message, or the Silence that ends the session: `awaiting_start` says
        whether session.start is still due, `idle_since` when the session last did anything
        (now while it plays audio)."""
        while True:
            if awaiting_start():
                deadline = self.opened_at + self._settings.start_timeout_s
            else:
                deadline = idle_since() + self._settings.idle_timeout_s
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await self._ws.receive()
            except TimeoutError:
                pass
            else:
                if message["type"] != "websocket.disconnect":
                    self.last_activity = time.monotonic()
                return message
            if awaiting_start():
                return Silence.NOT_STARTED
            if time.monotonic() - idle_since() >= self._settings.idle_timeout_s:
                return Silence.IDLE

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
