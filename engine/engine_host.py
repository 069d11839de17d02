"""The engine loop as a host runs it, whatever carries its messages: commands in, events out.

`host_main(spec, commands, events)` builds the engine from a picklable `EngineSpec` and runs its
loop; `commands` and `events` need only `get(timeout=)`, `get_nowait()` and `put()`, so a
multiprocessing queue (engine/process_engine.py: the engine in a child process) and a
`queue.Queue` (engine/ray_replica.py: the engine in a Ray actor) both serve. Commands come as
`CommandBatch`es: everything a caller issued during one turn of its event loop, in order.
`HostedClient` is the caller's side of the same messages: it gathers its commands into those
batches, and what the host sends back becomes stream events, answers, refusals, stats snapshots
or a failure (engine/client_base.py hands them out).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from engine.api import (
    Command,
    ConfigError,
    EngineOverloaded,
    InstallClipVoice,
    ModelFacts,
    ModelInputError,
    PendingVoice,
    RemoveClipVoice,
    TurnCommand,
    TurnFromSpeech,
    VoiceCommand,
)
from engine.client_base import ClientBase
from engine.config import EngineConfig
from engine.loop import Applied, EngineLoop, apply, prepare_speech_turns
from engine.outputs import (
    AudioChunk,
    EngineEvent,
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
    """What a host needs to build the engine (all picklable)."""

    model: str
    codec: str | None
    config: EngineConfig
    random_weights: bool = False
    voices_dir: str | None = None


# --- what the host is sent ---------------------------------------------------------------------
@dataclass(frozen=True)
class CommandBatch:
    """Commands with the tokens of the callers awaiting their answers (None: nobody awaits),
    in the order issued, applied by the host in that order, each answered with its own token.
    A full-duplex session pushes a command per 80-ms frame: one message for all the commands of
    an event-loop turn is one pickle, one pipe write (or one Ray call) and one wake-up of the
    host for them all, where a message each (some 1,600 a second at 128 sessions) would take
    the GIL from the host's engine loop as often."""

    commands: tuple[tuple[Command, int | None], ...]


# --- what the host sends back (besides engine events and stats snapshots) ----------------------
@dataclass(frozen=True)
class Ready:
    facts: ModelFacts
    stats: EngineStats


@dataclass(frozen=True)
class StartFailed:
    reason: str


@dataclass(frozen=True)
class Answered:
    token: int | None
    applied: Applied


@dataclass(frozen=True)
class Refused:
    token: int | None
    kind: str  # a key of _ERRORS
    message: str


@dataclass(frozen=True)
class Crashed:
    reason: str


@dataclass(frozen=True)
class StepEvents:
    """One engine step's events, in order, as one message: one pickle and one pipe write for
    them all (a full-duplex frame has one or two per session), and one wake-up of the caller's
    event loop (ClientBase._deliver_all)."""

    events: tuple[EngineEvent, ...]


def _error_kind(exc: Exception) -> str:
    for kind, cls in _ERRORS.items():
        if isinstance(exc, cls):
            return kind
    return "input"


def log_to_stderr(log_level: int) -> None:
    """The host process's log lines on stderr, formatted as the gateway's (the first call in a
    process sets them; later ones change nothing)."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def host_main(
    spec: EngineSpec, commands: Any, events: Any, log_level: int = logging.WARNING
) -> None:
    """Build the engine and run its loop until a `None` command (stop) or a failure; every
    outcome is reported on `events` (start-up: `Ready` or `StartFailed`). The engine's log
    lines (`log_level`: the parent's) go to the server's stderr, as the gateway's do."""
    log_to_stderr(log_level)
    from engine.factory import apply_gil_switch, load_engine_loop

    try:
        apply_gil_switch(spec.config)  # a spawned interpreter starts with Python's 5 ms
        model, core = load_engine_loop(
            spec.model, spec.codec, spec.config, False, spec.random_weights, spec.voices_dir
        )
    except Exception as exc:  # reported to the caller, which raises it from start()
        events.put(StartFailed(f"{type(exc).__name__}: {exc}"))
        return
    events.put(Ready(model.facts, core.stats()))
    turns = ThreadPoolExecutor(1, thread_name_prefix="voxgate-turns")
    # Voices encoded on the turns thread that must be put in place on this one (PendingVoice),
    # and removals, in the order the turns thread saw them.
    installs: queue.SimpleQueue[tuple[Command, int | None]] = queue.SimpleQueue()
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
                for command, token in message.commands:
                    if isinstance(command, TurnFromSpeech):
                        speech.append((command, token))
                    elif isinstance(command, RemoveClipVoice):
                        # Through the turns thread into `installs`: after the install of any
                        # voice it encoded before, so a voice added then removed at once never
                        # stays.
                        turns.submit(installs.put, (command, token))
                    elif isinstance(command, TurnCommand | VoiceCommand):  # model work, off loop
                        turns.submit(_apply, core, command, token, events, installs)
                    else:
                        _apply(core, command, token, events)
            while not installs.empty():
                _apply(core, *installs.get_nowait(), events)
            if speech:  # the spoken turns that came together: one batched audio-encoder run
                turns.submit(_apply_speech, core, speech, events)
            if core.has_work():
                stepped = core.step()
                if stepped:
                    events.put(StepEvents(tuple(stepped)))
            if time.monotonic() - last_stats > STATS_EVERY_S:
                events.put(core.stats())
                last_stats = time.monotonic()
    except BaseException as exc:  # never die silently: every stream gets a failure
        events.put(Crashed(f"engine failure: {exc}"))
        raise
    finally:
        turns.shutdown(wait=False, cancel_futures=True)
        core.close()


def _apply_speech(
    core: EngineLoop, speech: list[tuple[TurnFromSpeech, int | None]], events: Any
) -> None:
    results = prepare_speech_turns(core.model, [command for command, _ in speech])
    for (_, token), result in zip(speech, results, strict=True):
        if isinstance(result, Exception):
            events.put(Refused(token, _error_kind(result), str(result)))
        else:
            events.put(Answered(token, Applied(result)))


def _apply(
    core: EngineLoop,
    command: Command,
    token: int | None,
    events: Any,
    installs: queue.SimpleQueue | None = None,
) -> None:
    """Apply a command and answer it. A voice the model hands back pending (PendingVoice) goes
    to `installs`, for the loop's thread to put in place and answer."""
    try:
        applied = apply(core, command)
    except Exception as exc:  # handed to the caller, as the thread engine does
        events.put(Refused(token, _error_kind(exc), str(exc)))
        return
    if installs is not None and isinstance(applied.value, PendingVoice):
        installs.put((InstallClipVoice(applied.value), token))
        return
    if token is not None or applied.events:
        events.put(Answered(token, applied))


class HostedClient(ClientBase):
    """The caller's side of a hosted engine: commands are gathered into `CommandBatch`es that
    the transport (a subclass) sends with `_send_batch`, and it hands each message the host sent
    back to `_handle`.

    Gathering: the first command issued on a running event loop schedules one flush on that
    loop (`call_soon`); the commands issued until it runs, that turn's, go with it as one batch.
    A command issued off the loop (the reader thread cancels a request nobody waits for any
    more; a caller with no loop) goes at once, with the batch still gathered before it, so that
    the order in which commands were issued is the order applied whatever thread issued them.
    """

    def __init__(self) -> None:
        super().__init__()
        self._stats: EngineStats | None = None
        self.facts: ModelFacts | None = None
        self.failure: str | None = None
        # Held while a batch is gathered and while it is sent: two threads' sends never cross.
        self._batch_lock = threading.Lock()
        self._batch: list[tuple[Command, int | None]] = []
        self._flush_loop: asyncio.AbstractEventLoop | None = None  # its flush is scheduled

    def _send_batch(self, batch: CommandBatch) -> None:
        raise NotImplementedError

    def _send(self, command: Command, token: int | None) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._batch_lock:
            self._batch.append((command, token))
            if loop is not None and loop is self._flush_loop:
                return  # this turn's flush takes it
            if loop is not None and (self._flush_loop is None or self._flush_loop.is_closed()):
                self._flush_loop = loop
                loop.call_soon(self._end_turn)
                return
            self._send_gathered()  # off the loop (or on another one): at once

    def _end_turn(self) -> None:
        with self._batch_lock:
            self._flush_loop = None
            self._send_gathered()

    def _flush(self) -> None:
        """Send what is gathered now (before a shutdown's stop, which must come after it)."""
        with self._batch_lock:
            self._send_gathered()

    def _send_gathered(self) -> None:
        if self._batch:
            batch = CommandBatch(tuple(self._batch))
            self._batch.clear()
            self._send_batch(batch)

    def stats(self) -> EngineStats:
        stats = self._stats or EngineStats(0, 0, 0, 0, 0, StepTiming(), False)
        return EngineStats(**{**stats.__dict__, "stepping": self.ready})

    def _handle(self, message: object) -> None:
        match message:
            case StepEvents(stepped):
                self._deliver_all(stepped)
            case AudioChunk() | TextDelta() | WordTimings() | Finished():
                self._deliver(message)
            case EngineStats():
                self._stats = message
            case Answered(token, applied):
                self._answer(token, applied)
            case Refused(token, kind, text):
                self._refuse(token, _ERRORS[kind](text))
            case Crashed(reason):
                self.failure = reason
                log.error("%s", reason)
                self._fail_all(reason)
