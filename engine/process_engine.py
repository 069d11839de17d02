"""The engine loop in a process of its own, behind the same surface as `AsyncEngine`.

Why: in a thread, the engine shares the GIL with the gateway's event loop and the codec
thread, and every blocking torch call can cost it a whole switch interval
(`bench/gil_probe.py`). A child process has its own interpreter. Commands go down one
multiprocessing queue, engine events (audio as numpy arrays) and stats snapshots come back on
another, read by one thread here that hands them to the right `ResponseStream`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import multiprocessing as mp
import queue
import threading
import time
from dataclasses import dataclass

from engine.client import ResponseStream
from engine.config import EngineConfig
from engine.core import EngineOverloaded
from engine.outputs import EngineStats, Finished, FinishReason, SpeechRequest, StepTiming
from engine.request import ConfigError
from models.base import ModelInputError

log = logging.getLogger("voxgate.engine")

# Exceptions that cross back as (kind, message) and are raised again here, as the thread
# engine would raise them.
_ERRORS = {"input": ModelInputError, "overloaded": EngineOverloaded, "config": ConfigError}
STATS_EVERY_S = 0.05


@dataclass(frozen=True)
class EngineSpec:
    """What the child needs to build the engine (all picklable)."""

    model: str
    codec: str | None
    config: EngineConfig
    random_weights: bool = False
    voices_dir: str | None = None


def _error_kind(exc: Exception) -> str:
    for kind, cls in _ERRORS.items():
        if isinstance(exc, cls):
            return kind
    return "input"


def _child_main(spec: EngineSpec, commands: mp.Queue, events: mp.Queue) -> None:
    from engine.factory import (
        apply_cpu_threads,
        apply_gil_switch,
        build_core,
        model_options,
        resolve_device,
        resolve_dtype,
    )
    from engine.gc_pauses import freeze_loaded
    from models.registry import load_model

    try:
        device = resolve_device(spec.config)
        dtype = resolve_dtype(spec.config, device)
        apply_gil_switch(spec.config)  # a spawned interpreter starts with Python's 5 ms
        apply_cpu_threads(spec.config, device)
        model = load_model(
            spec.model,
            spec.codec,
            device,
            dtype,
            False,
            spec.random_weights,
            spec.voices_dir,
            model_options(spec.config),
        )
        core = build_core(model, spec.config, device)
        core.warm_up()
        freeze_loaded()
    except Exception as exc:  # reported to the parent, which raises it from start()
        events.put(("failed", f"{type(exc).__name__}: {exc}"))
        return
    events.put(("ready", model.facts, core.stats()))
    last_stats = 0.0
    try:
        while True:
            wait = core.seconds_until_due()  # full duplex: sleep until the next frame's tick
            block = not core.has_work() or (wait is not None and wait > 0)
            while True:
                try:
                    timeout = 0.05 if wait is None else min(max(wait, 0.001), 0.05)
                    command = commands.get(timeout=timeout) if block else commands.get_nowait()
                except queue.Empty:
                    break
                block = False
                if command[0] == "stop":
                    return
                _apply(core, command, events)
            if core.has_work():
                for event in core.step():
                    events.put(("event", event))
            if time.monotonic() - last_stats > STATS_EVERY_S:
                events.put(("stats", core.stats()))
                last_stats = time.monotonic()
    except BaseException as exc:  # never die silently: every stream gets a failure
        events.put(("crashed", f"engine failure: {exc}"))
        raise
    finally:
        core.close()


def _apply(core, command: tuple, events: mp.Queue) -> None:
    kind = command[0]
    if kind == "submit":
        _, token, request = command
        try:
            req = core.add_request(request)
        except Exception as exc:  # handed to the caller, as the thread engine does
            events.put(("refused", token, _error_kind(exc), str(exc)))
        else:
            events.put(("admitted", token, req.request_id))
    elif kind == "cancel":
        for event in core.cancel(command[1]):
            events.put(("event", event))
    elif kind == "playback":
        core.report_playback(command[1], command[2])
    elif kind == "audio":
        core.push_audio(command[1], command[2])
    elif kind == "end":
        for event in core.end_session(command[1]):
            events.put(("event", event))
    elif kind == "end_conversation":
        core.end_conversation(command[1])


class ProcessEngine:
    def __init__(self, spec: EngineSpec, start_timeout_s: float = 600.0) -> None:
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        ctx = mp.get_context("spawn")  # CUDA cannot be forked
        self._commands = ctx.Queue()
        self._events = ctx.Queue()
        self._process = ctx.Process(
            target=_child_main,
            args=(spec, self._commands, self._events),
            name="voxgate-engine",
            daemon=True,
        )
        self._tokens = itertools.count()
        self._pending: dict[int, tuple[concurrent.futures.Future, ResponseStream]] = {}
        self._streams: dict[str, ResponseStream] = {}
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._stats: EngineStats | None = None
        self.facts = None
        self.failure: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child and wait until its engine is built and warmed up."""
        self._process.start()
        try:
            message = self._events.get(timeout=self.start_timeout_s)
        except queue.Empty:
            self._process.kill()
            raise RuntimeError("the engine process did not become ready in time") from None
        if message[0] != "ready":
            self._process.join(5)
            raise RuntimeError(f"the engine process failed to start: {message[1]}")
        _, self.facts, self._stats = message
        self._reader = threading.Thread(
            target=self._read, name="voxgate-engine-events", daemon=True
        )
        self._reader.start()

    async def shutdown(self) -> None:
        if self._process.is_alive():
            self._commands.put(("stop",))
            await asyncio.to_thread(self._process.join, 10.0)
        if self._process.is_alive():
            self._process.kill()
        self._fail_all("the engine was shut down")

    @property
    def ready(self) -> bool:
        return self.facts is not None and self._process.is_alive() and self.failure is None

    # --- commands --------------------------------------------------------------------------------
    async def submit(self, request: SpeechRequest) -> ResponseStream:
        if not self.ready:
            raise RuntimeError("the engine is not running")
        stream = ResponseStream(asyncio.get_running_loop())
        future: concurrent.futures.Future = concurrent.futures.Future()
        token = next(self._tokens)
        with self._lock:
            self._pending[token] = (future, stream)
        self._commands.put(("submit", token, request))
        try:
            stream.request_id = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # The caller gave up: cancel the request if the child admits it.
            future.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() else self.cancel(f.result())
            )
            raise
        return stream

    def cancel(self, request_id: str) -> None:
        self._commands.put(("cancel", request_id))

    def report_playback(self, request_id: str, played_s: float) -> None:
        self._commands.put(("playback", request_id, played_s))

    def push_audio(self, request_id: str, pcm) -> None:
        self._commands.put(("audio", request_id, pcm))

    def end_session(self, request_id: str) -> None:
        self._commands.put(("end", request_id))

    def end_conversation(self, conversation_id: str) -> None:
        """The conversation's session closed: free the KV kept for its next turn."""
        self._commands.put(("end_conversation", conversation_id))

    def stats(self) -> EngineStats:
        stats = self._stats or EngineStats(0, 0, 0, 0, 0, StepTiming(), False)
        return EngineStats(**{**stats.__dict__, "stepping": self.ready})

    # --- the reader thread -------------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                message = self._events.get(timeout=0.5)
            except queue.Empty:
                if not self._process.is_alive():
                    self.failure = self.failure or "the engine process exited"
                    self._fail_all(self.failure)
                    return
                continue
            except (EOFError, OSError):
                return
            self._handle(message)

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "event":
            event = message[1]
            with self._lock:
                stream = self._streams.get(event.request_id)
                if isinstance(event, Finished):
                    self._streams.pop(event.request_id, None)
            if stream is not None:
                stream.push(event)
        elif kind == "stats":
            self._stats = message[1]
        elif kind in ("admitted", "refused"):
            with self._lock:
                future, stream = self._pending.pop(message[1])
                if kind == "admitted":
                    self._streams[message[2]] = stream
            if kind == "admitted":
                if not future.set_running_or_notify_cancel():
                    self.cancel(message[2])  # nobody waits for it any more
                    return
                future.set_result(message[2])
            elif future.set_running_or_notify_cancel():
                future.set_exception(_ERRORS[message[2]](message[3]))
        elif kind == "crashed":
            self.failure = message[1]
            log.error("%s", message[1])
            self._fail_all(message[1])

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            streams, self._streams = self._streams, {}
            pending, self._pending = self._pending, {}
        for request_id, stream in streams.items():
            stream.push(Finished(request_id, FinishReason.FAILED, 0, reason))
        for future, _ in pending.values():
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError(reason))
