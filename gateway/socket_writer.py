"""The one task that writes to a session's socket. Each connection has one reader and one
writer: only this task sends, so frames never interleave and a client that stops reading
stalls its own writer alone, never the session's reader or another session. It drains the
session's bounded send queue (gateway/pacing.py) in order; control overtakes audio before the
queue, where paced audio still waits for its slot, not here."""

from __future__ import annotations

import asyncio
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.pacing import SendQueue
from gateway.socket_items import OutClose, OutText


class SocketWriter:
    def __init__(self, ws: WebSocket, sendq: SendQueue, log: logging.LoggerAdapter) -> None:
        self._ws = ws
        self._sendq = sendq
        self._log = log
        self.disconnected = False  # a send failed: the peer is gone

    async def run(self) -> None:
        """Send queued items until an `OutClose` (sent as the close frame) or a dead socket."""
        while True:
            item = await self._sendq.get()
            try:
                if isinstance(item, OutClose):
                    await self._ws.close(item.code, item.reason)
                    return
                if isinstance(item, OutText):
                    await self._ws.send_text(item.text)
                elif isinstance(item.data, str):
                    await self._ws.send_text(item.data)
                else:
                    await self._ws.send_bytes(item.data)
            except (WebSocketDisconnect, OSError):
                self.disconnected = True
                return

    async def close_stuck(self, code: int, reason: str, timeout_s: float) -> None:
        """Close a socket whose client stopped reading. The close frame waits behind
        everything the client has not read; if it never reads again, give up after
        `timeout_s` (the session's engine work is already freed by then)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._ws.close(code, reason)
        except (TimeoutError, WebSocketDisconnect, OSError):
            self._log.info("close frame not delivered: the client is not reading")
