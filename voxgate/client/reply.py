"""One response as the client reads it: `ReplyStream` (its events, as they come) and `Reply`
(all of it, collected)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gateway.protocol_codes import ErrorCode, ResponseStatus
from voxgate.client.errors import ModelError
from voxgate.client.events import (
    Audio,
    Error,
    Event,
    ResponseDone,
    ResponseStarted,
    TranscriptDelta,
    Word,
    Words,
)

if TYPE_CHECKING:
    from voxgate.client.session import Session


@dataclass
class Reply:
    """A whole response: its outcome (`response.done`), its audio (the frames as sent and,
    when the session decodes, their PCM), its words, its transcript and its errors."""

    response_id: str
    status: str = ""
    audio_ms: int = 0
    ttfa_ms: int | None = None
    sample_rate: int = 0
    frames: list[bytes] = field(default_factory=list)
    pcm_parts: list[np.ndarray] = field(default_factory=list, repr=False)
    words: list[Word] = field(default_factory=list)
    transcript: str = ""
    heard_words: tuple[Word, ...] | None = None  # a cancelled response with word timings
    errors: list[Error] = field(default_factory=list)

    @property
    def pcm(self) -> np.ndarray:
        """The decoded audio, float32 mono at `sample_rate` (empty without decoding)."""
        return np.concatenate(self.pcm_parts) if self.pcm_parts else np.zeros(0, np.float32)

    @property
    def text(self) -> str:
        """The words spoken, as the model read them (sessions with word timings)."""
        return " ".join(w.word for w in self.words)

    @property
    def heard_text(self) -> str | None:
        """What the listener heard of a cancelled response (sessions with word timings)."""
        return None if self.heard_words is None else " ".join(w.word for w in self.heard_words)

    def add(self, event: Event) -> None:
        if isinstance(event, Audio):
            self.frames.append(event.data)
            if event.pcm is not None:
                self.pcm_parts.append(event.pcm)
                self.sample_rate = event.sample_rate
        elif isinstance(event, Words):
            self.words.extend(event.words)
        elif isinstance(event, TranscriptDelta):
            self.transcript += event.text
        elif isinstance(event, Error):
            self.errors.append(event)
        elif isinstance(event, ResponseDone):
            self.status, self.audio_ms, self.ttfa_ms = event.status, event.audio_ms, event.ttfa_ms
            self.heard_words = event.heard_words

    def raise_for_status(self) -> Reply:
        """Raise the typed error of a `failed` response (the first error it had); else self."""
        if self.status != ResponseStatus.FAILED:
            return self
        if self.errors:
            raise self.errors[0].exception()
        raise ModelError(ErrorCode.MODEL_ERROR, f"response {self.response_id} failed")


class ReplyStream:
    """The events of one response, from `response.started` to its `response.done` (both
    included). An `error` that comes before the response starts means the server did not open
    it (text too large, too many queued, bad input): iterating raises its typed error.

    Events of other responses are skipped: what comes before this response's `response.started`
    (the rest of a response cancelled and left unread, say) and any event naming another
    response. Events that name no response (`SpeechStarted`, `Error` …) are the session's and
    pass through once the response has started."""

    def __init__(self, session: Session, send: Callable[[], Awaitable[None]] | None) -> None:
        self._session = session
        self._send = send
        self.response_id: str | None = None

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        if self._send is not None:
            send, self._send = self._send, None
            await send()
        while True:
            event = await self._session.next_event()
            if self.response_id is None:
                if isinstance(event, Error):
                    raise event.exception()
                if not isinstance(event, ResponseStarted):
                    continue  # before this response: not one of its events
                self.response_id = event.response_id
            elif not self._is_own(event):
                continue
            yield event
            if isinstance(event, ResponseDone) and event.response_id == self.response_id:
                return

    def _is_own(self, event: Event) -> bool:
        """The event is this response's, or names no response (the session's)."""
        if not hasattr(event, "response_id"):
            return True
        return event.response_id == self.response_id

    async def collect(self) -> Reply:
        """Read the whole response. Raises the typed error of a response the server refused
        or that `failed`; a cancelled one returns normally (status `cancelled`)."""
        reply: Reply | None = None
        async for event in self:
            if isinstance(event, ResponseStarted) and reply is None:
                reply = Reply(event.response_id)
            elif reply is not None:
                reply.add(event)
        assert reply is not None
        return reply.raise_for_status()
