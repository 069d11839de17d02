"""The async face of the engine that the gateway (and `voxgate synth`) use.

The engine loop runs in its own thread, off the caller's event loop: model work releases the
GIL inside torch, so the gateway's Python keeps serving sockets while the GPU/CPU steps.
Commands (submit, cancel, playback) cross into the loop through a queue and are applied
between steps; events cross back with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from engine.core import EngineCore
from engine.outputs import EngineEvent, EngineStats, Finished, SpeechRequest

log = logging.getLogger("voxgate.engine")


@dataclass
class _Submit:
    request: SpeechRequest
    future: concurrent.futures.Future
    events: ResponseStream


@dataclass
class _Cancel:
    request_id: str


@dataclass
class _Playback:
    request_id: str
    played_s: float


@dataclass
class _Audio:
    request_id: str
    pcm: np.ndarray


@dataclass
class _End:
    request_id: str


@dataclass
class _EndConversation:
    conversation_id: str


class ResponseStream:
    """Audio chunks then exactly one `Finished`, for one request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request_id: str = "") -> None:
        self.request_id = request_id  # set on admission when not known up front
        self._loop = loop
        self._queue: asyncio.Queue[EngineEvent] = asyncio.Queue()

    def push(self, event: EngineEvent) -> None:
        """Deliver from any thread. A consumer whose event loop has closed is simply gone: that
        must never raise into (and stop) the engine thread."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def get(self) -> EngineEvent:
        return await self._queue.get()

    def __aiter__(self) -> AsyncIterator[EngineEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[EngineEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, Finished):
                return


class AsyncEngine:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.facts = core.model.facts
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, ResponseStream] = {}
        self._thread: threading.Thread | None = None
        self._stop = False
        self.failure: BaseException | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="voxgate-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10.0)
            self._thread = None
        self.core.close()

    @property
    def ready(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    # --- commands --------------------------------------------------------------------------------
    async def submit(self, request: SpeechRequest) -> ResponseStream:
        """Admit a request. Raises ModelInputError (bad input) or EngineOverloaded (no room)."""
        if not self.ready:
            raise RuntimeError("the engine is not running")
        stream = ResponseStream(asyncio.get_running_loop())
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._send(_Submit(request, future, stream))
        try:
            stream.request_id = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # The caller gave up: never leave an admitted request running with no listener.
            future.add_done_callback(self._cancel_orphan)
            future.cancel()
            raise
        return stream

    def _cancel_orphan(self, future: concurrent.futures.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            self.cancel(future.result())

    def cancel(self, request_id: str) -> None:
        self._send(_Cancel(request_id))

    def report_playback(self, request_id: str, played_s: float) -> None:
        self._send(_Playback(request_id, played_s))

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None:
        """User audio for a full-duplex session (float32 mono at the model's rate)."""
        self._send(_Audio(request_id, pcm))

    def end_session(self, request_id: str) -> None:
        """The user of a full-duplex session left: it ends between frames (`Finished` stop)."""
        self._send(_End(request_id))

    def end_conversation(self, conversation_id: str) -> None:
        """The conversation's session closed: free the KV kept for its next turn."""
        self._send(_EndConversation(conversation_id))

    def stats(self) -> EngineStats:
        return self.core.stats(stepping=self.ready)

    def _send(self, command: object) -> None:
        self._commands.put(command)
        self._wake.set()

    # --- the loop (engine thread) ----------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop:
                self._apply_commands()
                if not self.core.has_work():
                    self._wake.wait(timeout=0.5)
                    self._wake.clear()
                    continue
                wait = self.core.seconds_until_due()  # full duplex: the next frame's tick
                if wait is not None and wait > 0:
                    self._wake.wait(timeout=min(wait, 0.5))
                    self._wake.clear()
                    continue
                for event in self.core.step():
                    self._dispatch(event)
        except BaseException as exc:  # the loop must never die silently
            log.exception("engine loop failed")
            self.failure = exc
            self._fail_all(f"engine failure: {exc}")

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, _Submit):
                # A caller that gave up waiting (its task was cancelled) must not get a request
                # it no longer owns; and a running future can no longer be cancelled under us.
                if not command.future.set_running_or_notify_cancel():
                    continue
                try:
                    req = self.core.add_request(command.request)
                except Exception as exc:  # handed to the caller, who reports it to its client
                    command.future.set_exception(exc)
                    continue
                self._streams[req.request_id] = command.events
                command.future.set_result(req.request_id)
            elif isinstance(command, _Cancel):
                for event in self.core.cancel(command.request_id):
                    self._dispatch(event)
            elif isinstance(command, _Playback):
                self.core.report_playback(command.request_id, command.played_s)
            elif isinstance(command, _Audio):
                self.core.push_audio(command.request_id, command.pcm)
            elif isinstance(command, _End):
                for event in self.core.end_session(command.request_id):
                    self._dispatch(event)
            elif isinstance(command, _EndConversation):
                self.core.end_conversation(command.conversation_id)

    def _dispatch(self, event: EngineEvent) -> None:
        stream = self._streams.get(event.request_id)
        if stream is None:
            return
        if isinstance(event, Finished):
            del self._streams[event.request_id]
        stream.push(event)

    def _fail_all(self, message: str) -> None:
        from engine.outputs import FinishReason

        for request_id, stream in list(self._streams.items()):
            stream.push(Finished(request_id, FinishReason.FAILED, 0, message))
        self._streams.clear()
