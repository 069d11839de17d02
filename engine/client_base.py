"""What the two engine clients share, all but their transport: the `EngineClient` methods as
commands (engine/api.py), the table of request streams and of callers awaiting an answer, the
delivery of events, and the one fail-all that ends them when the engine dies.

A subclass sends a command with `_send(command, token)` (token None: nobody awaits an answer),
and reports what came of it with `_answer(token, applied)` / `_refuse(token, error)`, events
with `_deliver(event)` (a step's with `_deliver_all(events)`), and a dead engine with
`_fail_all(reason)`; it may call these from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.api import (
    AddClipVoice,
    AppendText,
    Cancel,
    Command,
    EndConversation,
    EndSession,
    EngineDead,
    PushAudio,
    RemoveClipVoice,
    ReportPlayback,
    ResponseStream,
    Submit,
    TurnCommand,
    VoiceClip,
)
from engine.loop import Applied
from engine.outputs import EngineEvent, Finished, FinishReason, SpeechRequest

log = logging.getLogger("voxgate.engine")


@dataclass(frozen=True)
class _Waiting:
    future: concurrent.futures.Future
    stream: ResponseStream | None  # a Submit's: it listens from admission on


class ClientBase:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, ResponseStream] = {}
        self._waiting: dict[int, _Waiting] = {}
        self._tokens = itertools.count()
        self._dead: str | None = None  # set by _fail_all: nothing more is answered

    # --- transport (the subclass's) --------------------------------------------------------------
    @property
    def ready(self) -> bool:
        raise NotImplementedError

    def _send(self, command: Command, token: int | None) -> None:
        raise NotImplementedError

    # --- the contract ----------------------------------------------------------------------------
    async def submit(self, request: SpeechRequest) -> ResponseStream:
        """Admit a request. Raises ModelInputError (bad input), EngineOverloaded (no room) or
        EngineDead."""
        if not self.ready:
            raise EngineDead("the engine is not running")
        stream = ResponseStream(asyncio.get_running_loop())
        stream.request_id = await self._ask(Submit(request), stream)
        return stream

    async def prepare_turn(self, command: TurnCommand) -> Any:
        if not self.ready:
            raise EngineDead("the engine is not running")
        return await self._ask(command)

    async def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        if not self.ready:
            raise EngineDead("the engine is not running")
        return await self._ask(AddClipVoice(name, clip))

    def remove_clip_voice(self, name: str) -> None:
        self._send(RemoveClipVoice(name), None)

    def cancel(self, request_id: str) -> None:
        self._send(Cancel(request_id), None)

    def report_playback(self, request_id: str, played_s: float) -> None:
        self._send(ReportPlayback(request_id, played_s), None)

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None:
        """User audio for a full-duplex session (float32 mono at the model's rate)."""
        self._send(PushAudio(request_id, pcm), None)

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        """More text for a streamed-text request (SpeechRequest.text_stream)."""
        self._send(AppendText(request_id, text, final), None)

    def end_session(self, request_id: str) -> None:
        """The user of a full-duplex session left: it ends between frames (`Finished` stop)."""
        self._send(EndSession(request_id), None)

    def end_conversation(self, conversation_id: str) -> None:
        """The conversation's session closed: free the KV kept for its next turn."""
        self._send(EndConversation(conversation_id), None)

    def serves(self, request_id: str) -> bool:
        """Whether a request of this engine's is still open (a pool of replicas routes a
        request's later commands by it)."""
        with self._lock:
            return request_id in self._streams

    # --- answers ---------------------------------------------------------------------------------
    async def _ask(self, command: Command, stream: ResponseStream | None = None) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._dead is not None:
                raise EngineDead(self._dead)
            token = next(self._tokens)
            self._waiting[token] = _Waiting(future, stream)
        self._send(command, token)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # The caller gave up: never leave an admitted request running with no listener.
            if stream is not None:
                future.add_done_callback(self._cancel_orphan)
            future.cancel()
            raise

    def _cancel_orphan(self, future: concurrent.futures.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            self.cancel(future.result())

    def _wanted(self, token: int) -> bool:
        """Whether the caller still waits for this command's answer (a cancelled submit is
        better not applied at all)."""
        with self._lock:
            waiting = self._waiting.get(token)
            if waiting is not None and waiting.future.cancelled():
                del self._waiting[token]
                return False
        return waiting is not None

    def _answer(self, token: int | None, applied: Applied) -> None:
        waiting = self._take(token)
        if waiting is not None:
            if waiting.stream is not None:  # an admitted request: its events go to the stream
                with self._lock:
                    self._streams[applied.value] = waiting.stream
            if waiting.future.set_running_or_notify_cancel():
                waiting.future.set_result(applied.value)
            elif waiting.stream is not None:
                self.cancel(applied.value)  # nobody waits for it any more
        for event in applied.events:
            self._deliver(event)

    def _refuse(self, token: int | None, error: BaseException) -> None:
        waiting = self._take(token)
        if waiting is None:  # a command nobody awaits (cancel, push_audio ...): say so
            log.warning("engine command refused: %s: %s", type(error).__name__, error)
        elif waiting.future.set_running_or_notify_cancel():
            waiting.future.set_exception(error)

    def _take(self, token: int | None) -> _Waiting | None:
        if token is None:
            return None
        with self._lock:
            return self._waiting.pop(token, None)

    def _deliver(self, event: EngineEvent) -> None:
        self._deliver_all((event,))

    def _deliver_all(self, events: Sequence[EngineEvent]) -> None:
        """An engine step's events, in order, to their streams: one wake-up of the consumers'
        event loop for all of them (ResponseStream.push_all)."""
        pairs = []
        with self._lock:
            for event in events:
                stream = self._streams.get(event.request_id)
                if isinstance(event, Finished):
                    self._streams.pop(event.request_id, None)
                if stream is not None:
                    pairs.append((stream, event))
        ResponseStream.push_all(pairs)

    def _fail_all(self, reason: str) -> None:
        """The engine is gone: every stream ends `failed` with `reason`, every caller still
        awaiting an answer gets EngineDead, and so does every later one."""
        with self._lock:
            self._dead = reason
            streams, self._streams = self._streams, {}
            waiting, self._waiting = self._waiting, {}
        for request_id, stream in streams.items():
            stream.lose(Finished(request_id, FinishReason.FAILED, 0, reason))
        for w in waiting.values():
            if w.future.set_running_or_notify_cancel():
                w.future.set_exception(EngineDead(reason))
