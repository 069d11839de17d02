"""The engine loop in a process of its own (`EngineClient`, engine/api.py).

Why: in a thread, the engine shares the GIL with the gateway's event loop and the codec
thread, and every blocking torch call can cost it a whole switch interval
(`bench/gil_probe.py`). A child process has its own interpreter. Commands (engine/api.py's
values, with the token of the caller awaiting the answer) go down one multiprocessing queue
and are applied there between steps (engine/loop.py:apply); engine events (audio as numpy
arrays), answers and stats snapshots come back on another, read by one thread here
(engine/client_base.py hands them out). Turn preparation (the speech tokenizer ...) and the
encoding of clients' voice clips run in the child on a thread of their own, beside the loop,
as the thread client runs them beside its.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from engine.api import (
    Command,
    ConfigError,
    EngineOverloaded,
    ModelFacts,
    ModelInputError,
    TurnCommand,
    TurnFromSpeech,
    VoiceCommand,
)
from engine.client_base import ClientBase
from engine.config import EngineConfig
from engine.loop import Applied, EngineLoop, apply, prepare_speech_turns
from engine.outputs import (
    AudioChunk,
    EngineStats,
    Finished,
    StepTiming,
    TextDelta,
    WordTimings,
)

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


# --- what the child sends back (besides engine events and stats snapshots) ----------------------
@dataclass(frozen=True)
class _Ready:
    facts: ModelFacts
    stats: EngineStats


@dataclass(frozen=True)
class _StartFailed:
    reason: str


@dataclass(frozen=True)
class _Answered:
    token: int | None
    applied: Applied


@dataclass(frozen=True)
class _Refused:
    token: int | None
    kind: str  # a key of _ERRORS
    message: str


@dataclass(frozen=True)
class _Crashed:
    reason: str


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
        load_options,
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
            load_options(spec.config),
        )
        core = build_core(model, spec.config, device)
        core.warm_up()
        freeze_loaded()
    except Exception as exc:  # reported to the parent, which raises it from start()
        events.put(_StartFailed(f"{type(exc).__name__}: {exc}"))
        return
    events.put(_Ready(model.facts, core.stats()))
    turns = ThreadPoolExecutor(1, thread_name_prefix="voxgate-turns")
    last_stats = 0.0
    try:
        while True:
            wait = core.seconds_until_due()  # full duplex: sleep until the next frame's tick
            block = not core.has_work() or (wait is not None and wait > 0)
            speech: list[tuple[TurnFromSpeech, int | None]] = []
            while True:
                try:
                    timeout = 0.05 if wait is None else min(max(wait, 0.001), 0.05)
                    message = commands.get(timeout=timeout) if block else commands.get_nowait()
                except queue.Empty:
                    break
                block = False
                if message is None:  # stop
                    return
                command, token = message
                if isinstance(command, TurnFromSpeech):
                    speech.append((command, token))
                elif isinstance(command, TurnCommand | VoiceCommand):  # model work, off the loop
                    turns.submit(_apply, core, command, token, events)
                else:
                    _apply(core, command, token, events)
            if speech:  # the spoken turns that came together: one batched audio-encoder run
                turns.submit(_apply_speech, core, speech, events)
            if core.has_work():
                for event in core.step():
                    events.put(event)
            if time.monotonic() - last_stats > STATS_EVERY_S:
                events.put(core.stats())
                last_stats = time.monotonic()
    except BaseException as exc:  # never die silently: every stream gets a failure
        events.put(_Crashed(f"engine failure: {exc}"))
        raise
    finally:
        turns.shutdown(wait=False, cancel_futures=True)
        core.close()


def _apply_speech(
    core: EngineLoop, speech: list[tuple[TurnFromSpeech, int | None]], events: mp.Queue
) -> None:
    results = prepare_speech_turns(core.model, [command for command, _ in speech])
    for (_, token), result in zip(speech, results, strict=True):
        if isinstance(result, Exception):
            events.put(_Refused(token, _error_kind(result), str(result)))
        else:
            events.put(_Answered(token, Applied(result)))


def _apply(core: EngineLoop, command: Command, token: int | None, events: mp.Queue) -> None:
    try:
        applied = apply(core, command)
    except Exception as exc:  # handed to the caller, as the thread engine does
        events.put(_Refused(token, _error_kind(exc), str(exc)))
        return
    if token is not None or applied.events:
        events.put(_Answered(token, applied))


class ProcessEngine(ClientBase):
    def __init__(self, spec: EngineSpec, start_timeout_s: float = 600.0) -> None:
        super().__init__()
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
        self._reader: threading.Thread | None = None
        self._stats: EngineStats | None = None
        self.facts: ModelFacts | None = None
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
        if not isinstance(message, _Ready):
            self._process.join(5)
            raise RuntimeError(f"the engine process failed to start: {message.reason}")
        self.facts, self._stats = message.facts, message.stats
        self._reader = threading.Thread(
            target=self._read, name="voxgate-engine-events", daemon=True
        )
        self._reader.start()

    async def shutdown(self) -> None:
        if self._process.is_alive():
            self._commands.put(None)
            await asyncio.to_thread(self._process.join, 10.0)
        if self._process.is_alive():
            self._process.kill()
        self._fail_all("the engine was shut down")

    @property
    def ready(self) -> bool:
        return self.facts is not None and self._process.is_alive() and self.failure is None

    def stats(self) -> EngineStats:
        stats = self._stats or EngineStats(0, 0, 0, 0, 0, StepTiming(), False)
        return EngineStats(**{**stats.__dict__, "stepping": self.ready})

    def _send(self, command: Command, token: int | None) -> None:
        self._commands.put((command, token))

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

    def _handle(self, message: object) -> None:
        match message:
            case AudioChunk() | TextDelta() | WordTimings() | Finished():
                self._deliver(message)
            case EngineStats():
                self._stats = message
            case _Answered(token, applied):
                self._answer(token, applied)
            case _Refused(token, kind, text):
                self._refuse(token, _ERRORS[kind](text))
            case _Crashed(reason):
                self.failure = reason
                log.error("%s", reason)
                self._fail_all(reason)
