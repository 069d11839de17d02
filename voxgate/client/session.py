"""One `/v1/stream` session from the client's side (docs/protocol.md).

`connect()` (connect.py) opens the socket (with the API key in a header, or in an offered `bearer.<key>`
subprotocol), sends `session.start` and waits for `session.started`; a refusal raises the typed
error the server gave (voxgate.client.errors). From then on a reader task receives every frame:
JSON events become typed values (voxgate.client.events), binary frames `Audio` values, decoded
to PCM as they arrive (PyAV: libopus, μ-law), in one queue read by `events()` / `next_event()`.

`speak(text)` and `next_reply()` read that queue for one response: iterate the events up to its
`response.done`, or `collect()` them into a `Reply`. They and `events()` share the queue, so one
task at a time should read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from gateway.protocol_codes import CloseCode, ErrorCode
from voxgate.client.audio import InputEncoder, OutputDecoder
from voxgate.client.errors import (
    AuthenticationError,
    SessionClosed,
    UnsupportedInput,
    VoxgateError,
    session_closed,
)
from voxgate.client.events import (
    Audio,
    Error,
    Event,
    ResponseStarted,
    SessionEnded,
    SessionInfo,
    parse_event,
)
from voxgate.client.reply import ReplyStream

__all__ = ["Session"]


@dataclass(frozen=True)
class _Closed:
    """The reader's last item: the socket closed (or the server sent what we cannot read)."""

    code: int | None
    reason: str
    failure: Exception | None = None


class Session:
    """An open session (module docstring). Build it with `connect()`."""

    def __init__(self, ws: ClientConnection, decode_audio: bool = True) -> None:
        self._ws = ws
        self._decode = decode_audio
        self._queue: asyncio.Queue[Event | _Closed] = asyncio.Queue()
        self._closed: _Closed | None = None
        self._fatal: Error | None = None  # a fatal error event: the close that follows is why
        self._decoder: OutputDecoder | None = None
        self._response_id: str | None = None
        self._encoder: InputEncoder | None = None
        self.info: SessionInfo | None = None
        self._reader = asyncio.create_task(self._read(), name="voxgate-client-reader")

    # --- opening ---------------------------------------------------------------------------
    async def _start(self, event: dict[str, Any], timeout: float) -> SessionInfo:
        try:
            async with asyncio.timeout(timeout):
                await self.send_event(event)
                while True:
                    item = await self.next_event()
                    if isinstance(item, SessionInfo):
                        self.info = item
                        return item
                    if isinstance(item, Error) and not item.fatal:
                        raise item.exception()
                    # A fatal error: the close that follows raises it (next_event).
        except SessionClosed as exc:
            if exc.code == CloseCode.POLICY:  # closed before any message: the API key
                raise AuthenticationError(f"the server refused the session: {exc}") from None
            raise

    # --- sending ---------------------------------------------------------------------------
    async def send_event(self, event: Mapping[str, Any]) -> None:
        """Send one client event as it is (a JSON object with a `type`)."""
        await self._send(json.dumps(event))

    async def _send(self, message: str | bytes) -> None:
        """Send a frame; on a closed session, raise why it closed (its typed error)."""
        try:
            await self._ws.send(message)
        except ConnectionClosed:
            # The reader reads what the server sent before its close (the `error` saying why)
            # and ends with the connection, which websockets' close timeout bounds.
            await asyncio.wait({self._reader})
            raise self._close_error(
                _Closed(self._ws.close_code, self._ws.close_reason or "")
            ) from None

    async def send_text(
        self, text: str, final: bool = True, extra: Mapping[str, Any] | None = None
    ) -> None:
        """Text to speak. `final=False` appends to the open response (text streaming in from an
        LLM); `final=True` closes its input. A text while no response is open opens one.
        `extra`: more fields of the event, merged in as they are (a response's own options)."""
        await self.send_event({"type": "text", "text": text, "final": final, **(extra or {})})

    async def send_audio(self, frame: bytes) -> None:
        """One binary frame of microphone audio, already in the session's `input_audio`
        format (one Opus packet, or pcm16 / μ-law samples)."""
        await self._send(frame)

    async def send_pcm(self, pcm: np.ndarray, sample_rate: int) -> int:
        """Microphone samples (float32 mono in [-1, 1], any rate): encoded to the session's
        `input_audio` format, cut into its frames and sent. Returns the frames sent; samples
        short of a whole frame wait for the next call (`commit` sends them)."""
        encoder = self._input_encoder(sample_rate)
        frames = encoder.encode(pcm)
        for frame in frames:
            await self._send(frame)
        return len(frames)

    async def flush_audio(self) -> int:
        """Send the microphone audio still held back, padded to a whole frame."""
        if self._encoder is None:
            return 0
        frames, self._encoder = self._encoder.flush(), None
        for frame in frames:
            await self._send(frame)
        return len(frames)

    async def commit(self) -> None:
        """The user's turn is over (`input.commit`), after the audio still held back."""
        await self.flush_audio()
        await self.send_event({"type": "input.commit"})

    async def cancel(self) -> None:
        """Barge-in: stop the current response now (`response.cancel`)."""
        await self.send_event({"type": "response.cancel"})

    async def report_playback(self, played_ms: float) -> None:
        """How much of the current response the listener has actually heard (`playback`)."""
        await self.send_event({"type": "playback", "played_ms": played_ms})

    def _input_encoder(self, sample_rate: int) -> InputEncoder:
        spec = self.info.input_audio if self.info is not None else None
        if spec is None:
            name = self.info.model if self.info is not None else "this model"
            raise UnsupportedInput(
                ErrorCode.UNSUPPORTED_INPUT, f"{name} takes no audio input (session.started)"
            )
        if self._encoder is None or self._encoder.source_rate != sample_rate:
            self._encoder = InputEncoder(spec, sample_rate)
        return self._encoder

    # --- receiving -------------------------------------------------------------------------
    async def next_event(self, timeout: float | None = None) -> Event:
        """The next event from the server. Once the session has closed: raises the fatal error
        that closed it, or SessionClosed (a normal end too, code 1000)."""
        if self._closed is None:
            item = await asyncio.wait_for(self._queue.get(), timeout)
            if not isinstance(item, _Closed):
                return item
            self._closed = item
        raise self._close_error(self._closed)

    async def events(self) -> AsyncIterator[Event]:
        """Every event until the session ends: a normal end (`session.ended`, 1000) stops the
        iteration, any other close raises its typed error."""
        while True:
            try:
                yield await self.next_event()
            except SessionClosed as exc:
                if exc.code == CloseCode.NORMAL:
                    return
                raise

    def speak(self, text: str, extra: Mapping[str, Any] | None = None) -> ReplyStream:
        """Speak `text` (one `text` event, final; `extra` as for send_text): iterate the
        response's events, or `await session.speak(text).collect()` for the whole `Reply`."""
        return ReplyStream(self, lambda: self.send_text(text, True, extra))

    def next_reply(self) -> ReplyStream:
        """The next response, whatever opens it (text sent with `send_text(..., final=False)`,
        a spoken turn); sends nothing."""
        return ReplyStream(self, None)

    def _close_error(self, closed: _Closed) -> VoxgateError:
        if closed.failure is not None:
            return VoxgateError(f"the server sent what this client cannot read: {closed.failure}")
        if self._fatal is not None:
            return self._fatal.exception(closed.code)
        return session_closed(closed.code, closed.reason)

    async def _read(self) -> None:
        failure: Exception | None = None
        try:
            async for message in self._ws:
                self._queue.put_nowait(self._received(message, time.monotonic()))
        except ConnectionClosed:
            pass
        except (ValueError, KeyError) as exc:  # not the protocol: give up on this session
            failure = exc
            await self._ws.close(CloseCode.POLICY, "unreadable event")
        finally:
            self._queue.put_nowait(
                _Closed(self._ws.close_code, self._ws.close_reason or "", failure)
            )

    def _received(self, message: str | bytes, now: float) -> Event:
        if isinstance(message, bytes):
            rate = self._decoder.sample_rate if self._decoder is not None else 0
            pcm = self._decoder.decode(message) if self._decoder is not None else None
            return Audio(self._response_id, message, pcm, rate, now)
        event = parse_event(message, now)
        if isinstance(event, SessionInfo) and self._decode and event.output_audio:
            self._decoder = OutputDecoder(event.output_audio)
        elif isinstance(event, ResponseStarted):
            self._response_id = event.response_id
            if self._decoder is not None:
                self._decoder.reset()  # each response is a new encoder's stream
        elif isinstance(event, Error) and event.fatal:
            self._fatal = event
        return event

    # --- ending ----------------------------------------------------------------------------
    async def end(self, timeout: float = 10.0) -> str:
        """End gracefully (`session.end`): the current response stops, the server answers
        `session.ended` and closes with 1000. Returns the `session.ended` reason; events still
        queued before it are dropped."""
        with contextlib.suppress(ConnectionClosed):
            await self.send_event({"type": "session.end"})
        reason = ""
        try:
            async with asyncio.timeout(timeout):
                async for event in self.events():
                    if isinstance(event, SessionEnded):
                        reason = event.reason
        finally:
            await self.close()
        return reason

    async def close(self) -> None:
        """Close the socket now (no `session.end`); safe to call more than once."""
        await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    @property
    def closed(self) -> bool:
        return self._reader.done()

    @property
    def close_code(self) -> int | None:
        """The close code once the session has closed (1000 after a normal end)."""
        return self._ws.close_code

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
