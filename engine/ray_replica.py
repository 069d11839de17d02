"""An engine replica as a Ray actor: the same engine loop a `voxgate serve` runs in its own
process (engine/engine_host.py), hosted in the actor's process, on the GPU (or CPUs) Ray gave it.

The loop runs in a child process of the actor (engine/process_engine.py's, with its two
multiprocessing queues), not on a thread of it: the actor's process handles every Ray call
(a `send` per turn of each caller's event loop, a `poll` per batch of events, their pickling),
and an engine loop on a thread beside them loses the GIL to them often enough to miss its
frames' deadlines at a hundred full-duplex sessions. Callers
(engine/ray_engine.py; one per gateway process sharing the replica) reach it with plain Ray
actor calls, each naming the caller:

- `send(client, seq, batch)`: a `CommandBatch` (engine/engine_host.py: the commands of one turn
  of the caller's event loop, in order), numbered by its caller. The actor is threaded (a
  blocking `poll` must not hold up a `send`), and a threaded actor may run two calls out of
  order, so a caller's batches are put on the loop's queue in its numbering, a late one
  waiting for those before it (a `cancel` never overtakes its `submit`, audio keeps its order).
- `poll(client, wait_s)`: everything for this caller since its last poll (its requests' events,
  the answers to its commands, stats), waiting up to `wait_s` for the first. One call carries
  many events: audio crosses as numpy arrays inside Ray's reply, with no object-store round trip
  for chunk-sized arrays.
- `start(timeout_s)`: waits until the engine is built and warmed up; its facts, or the reason
  it could not start. `detach(client)`: a caller leaves; its open requests are cancelled.

A router thread hands the loop's messages to the callers' outboxes. A caller that stops
polling for `STALE_CLIENT_S` (its gateway process died) is detached the same way.

Ray is imported here and in engine/ray_engine.py only; nothing else of Voxgate imports either
unless `--replicas` is given.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import multiprocessing as mp
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from engine.api import Cancel, Submit
from engine.engine_host import (
    Answered,
    CommandBatch,
    Crashed,
    EngineSpec,
    Ready,
    Refused,
    StartFailed,
    StepEvents,
)
from engine.outputs import AudioChunk, EngineStats, Finished, TextDelta, WordTimings
from engine.process_engine import engine_process_main

ENGINE_CHECK_S = 0.5  # how often the router, with nothing to route, checks the engine is alive
POLL_BATCH = 256  # messages one poll carries at most (the rest wait for the next)
STALE_CLIENT_S = 30.0  # a caller silent this long has gone: its requests are cancelled


@dataclass
class _Client:
    """One caller's side of the replica: its outbox and the order of its commands."""

    outbox: queue.Queue = field(default_factory=queue.Queue)
    last_poll: float = field(default_factory=time.monotonic)
    next_seq: int = 0
    early: dict[int, CommandBatch] = field(default_factory=dict)  # come before their turn


class ReplicaHost:
    """The actor's body (ray.remote wraps it in `replica_actor`). Several callers may share it
    (gateway processes on one port): each names itself in every call, its commands' tokens
    are mapped to the replica's own, and each gets back the answers to its commands and the
    events of the requests it submitted; stats and a crash go to every caller."""

    def __init__(self, spec: EngineSpec) -> None:
        ctx = mp.get_context("spawn")  # CUDA cannot be forked
        commands, events = ctx.Queue(), ctx.Queue()
        level = logging.getLogger().getEffectiveLevel()
        engine = ctx.Process(
            target=engine_process_main,
            args=(_local_spec(spec), commands, events, level),
            name="voxgate-engine",
            daemon=True,
        )
        self._begin(engine, commands, events)

    def _setup(self, loop_main: Any, *args: Any) -> None:
        """Run `loop_main(*args, commands, events)` on a thread, with `queue.Queue`s, in place
        of the engine process (a scripted loop: tests, bench/ray_transport_probe.py)."""
        commands: queue.Queue = queue.Queue()
        events: queue.Queue = queue.Queue()
        loop = threading.Thread(
            target=loop_main, args=(*args, commands, events), name="voxgate-engine", daemon=True
        )
        self._begin(loop, commands, events)

    def _begin(self, engine: threading.Thread | BaseProcess, commands: Any, events: Any) -> None:
        """Start the engine loop (`engine`, reading `commands`, writing `events`) and the
        router."""
        self._commands = commands
        self._events = events
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._detached: set[str] = set()  # callers gone (or silent too long): never served again
        self._tokens = itertools.count()
        self._token_owner: dict[int, tuple[str, int | None]] = {}
        self._request_owner: dict[str, str] = {}
        self._submits: set[int] = set()  # replica tokens of Submit commands
        self._started = threading.Event()
        self._start: Ready | StartFailed | None = None
        self._stopping = False
        self._ended = False  # its StartFailed or Crashed was routed: its end is told
        self._engine = engine
        engine.start()
        threading.Thread(target=self._route, name="voxgate-replica-router", daemon=True).start()

    def start(self, timeout_s: float) -> Ready:
        """The engine's facts once it is built and warmed up (every caller may ask);
        RuntimeError if it failed."""
        if not self._started.wait(timeout_s):
            raise RuntimeError("the engine replica did not become ready in time")
        if isinstance(self._start, StartFailed):
            raise RuntimeError(f"the engine replica failed to start: {self._start.reason}")
        return self._start

    def send(self, client: str, seq: int, batch: CommandBatch) -> None:
        with self._lock:
            if client in self._detached:
                return  # its next poll tells it
            caller = self._clients.setdefault(client, _Client())
            caller.early[seq] = batch
            while caller.next_seq in caller.early:
                batch = caller.early.pop(caller.next_seq)
                caller.next_seq += 1
                self._commands.put(CommandBatch(tuple(self._ours(client, batch))))

    def _ours(self, client: str, batch: CommandBatch) -> list:
        """The batch with its caller's tokens mapped to the replica's own."""
        commands = []
        for command, token in batch.commands:
            ours = None
            if token is not None:
                ours = next(self._tokens)
                self._token_owner[ours] = (client, token)
                if isinstance(command, Submit):
                    self._submits.add(ours)
            commands.append((command, ours))
        return commands

    def poll(self, client: str, wait_s: float) -> list[Any]:
        with self._lock:
            if client in self._detached:
                return [Crashed("this gateway was detached from the replica (it stopped polling)")]
            caller = self._clients.setdefault(client, _Client())
            caller.last_poll = time.monotonic()
            outbox = caller.outbox
        try:
            messages = [outbox.get(timeout=wait_s)]
        except queue.Empty:
            return []
        while len(messages) < POLL_BATCH:
            try:
                messages.append(outbox.get_nowait())
            except queue.Empty:
                break
        return messages

    def detach(self, client: str) -> None:
        """A caller leaves (its gateway shuts down): its open requests are cancelled and
        nothing more is kept for it."""
        with self._lock:
            self._detach(client)

    def _detach(self, client: str) -> None:
        self._clients.pop(client, None)
        self._detached.add(client)
        for request_id, owner in list(self._request_owner.items()):
            if owner == client:
                del self._request_owner[request_id]
                self._commands.put(CommandBatch(((Cancel(request_id), None),)))

    def stop(self) -> None:
        self._stopping = True
        self._commands.put(None)
        self._engine.join(10.0)
        if isinstance(self._engine, BaseProcess) and self._engine.is_alive():
            self._engine.kill()

    def where(self) -> dict:
        """The process and machine this replica runs on (logs, tests)."""
        return {"pid": os.getpid(), "host": socket.gethostname()}

    # --- the router thread: the loop's messages → each caller's outbox ---------------------------
    def _route(self) -> None:
        while True:
            try:
                message = self._events.get(timeout=ENGINE_CHECK_S)
            except queue.Empty:
                if self._engine.is_alive() or self._stopping:
                    continue
                if not self._ended:  # gone without a word (killed, out of memory)
                    self._route_message(self._engine_gone())
                return
            self._route_message(message)

    def _route_message(self, message: Any) -> None:
        self._ended = self._ended or isinstance(message, StartFailed | Crashed)
        if isinstance(message, Ready | StartFailed):
            self._start = message
            self._started.set()
            return
        with self._lock:
            self._route_one(message)

    def _engine_gone(self) -> Crashed | StartFailed:
        code = getattr(self._engine, "exitcode", None)
        reason = f"the replica's engine process exited (code {code})"
        if self._start is None:
            return StartFailed(reason)
        return Crashed(f"engine failure: {reason}")

    def _route_one(self, message: Any) -> None:
        match message:
            case StepEvents(stepped):
                for event in stepped:
                    self._to_owner(event)
            case AudioChunk() | TextDelta() | WordTimings() | Finished():
                self._to_owner(message)
            case Answered(token, applied):
                client, theirs = self._owner_of(token)
                if token in self._submits:
                    self._submits.discard(token)
                    self._request_owner[applied.value] = client
                if client is not None:
                    self._put(client, Answered(theirs, dataclasses.replace(applied, events=())))
                for event in applied.events:
                    self._to_owner(event)
            case Refused(token, kind, text):
                self._submits.discard(token)
                client, theirs = self._owner_of(token)
                if client is not None:
                    self._put(client, Refused(theirs, kind, text))
            case EngineStats():
                now = time.monotonic()
                for client, caller in list(self._clients.items()):
                    if now - caller.last_poll > STALE_CLIENT_S:
                        self._detach(client)
                    else:
                        caller.outbox.put(message)
            case Crashed():
                for caller in self._clients.values():
                    caller.outbox.put(message)

    def _owner_of(self, token: int | None) -> tuple[str | None, int | None]:
        if token is None:
            return None, None
        return self._token_owner.pop(token, (None, None))

    def _to_owner(self, event: AudioChunk | TextDelta | Finished) -> None:
        owner = self._request_owner.get(event.request_id)
        if isinstance(event, Finished):
            self._request_owner.pop(event.request_id, None)
        elif isinstance(event, AudioChunk) and event.made_s is not None:
            # The caller may be on another host, where this host's clock means nothing.
            event = dataclasses.replace(event, made_s=None)
        if owner is not None:
            self._put(owner, event)

    def _put(self, client: str, message: Any) -> None:
        caller = self._clients.get(client)
        if caller is not None:  # a caller that detached gets nothing more
            caller.outbox.put(message)


def _local_spec(spec: EngineSpec) -> EngineSpec:
    """The spec with the settings left to the engine made concrete here, on the replica's own
    machine and devices (the gateway's may have no GPU); the engine is already in a process
    of its own (the replica's child)."""
    from engine.factory import serving_defaults

    config = serving_defaults(spec.config, spec.model)
    return dataclasses.replace(spec, config=dataclasses.replace(config, engine_process=False))


# Calls a replica runs at once beyond its callers' polls. The actor is threaded with a fixed
# number of threads, and every caller always has one `poll` waiting (up to its POLL_WAIT_S) on
# one of them: with no thread to spare, a caller's `send` (its sessions' microphone frames)
# waits behind the polls and reaches the engine late, and a caller's next poll waits behind
# the others' and delivers its events late. Sends, `start`, `where`, `detach` and `stop` take
# the spare ones.
SPARE_CALL_SLOTS = 4


def replica_concurrency(callers: int) -> int:
    """Threads a replica needs for `callers` callers (gateway processes, and the process that
    owns the replicas, which polls too)."""
    return max(1, callers) + SPARE_CALL_SLOTS


_ACTOR: Any = None


def replica_actor() -> Any:
    """The Ray actor class (made once; importing Ray only when asked). Its threads are set
    per replica when it is placed (`replica_concurrency`)."""
    global _ACTOR
    if _ACTOR is None:
        import ray

        _ACTOR = ray.remote(max_concurrency=replica_concurrency(1), max_restarts=0)(ReplicaHost)
    return _ACTOR
