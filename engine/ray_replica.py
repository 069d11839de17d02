"""An engine replica as a Ray actor: the same engine loop a `voxgate serve` runs in its own
process (engine/engine_host.py), hosted in the actor's process, on the GPU (or CPUs) Ray gave it.

The loop runs on a thread of the actor and talks through two `queue.Queue`s. The caller
(engine/ray_engine.py) reaches them with three actor methods, each a plain Ray actor call:

- `send(seq, command, token)`: a command, numbered by the caller. The actor is threaded (a
  blocking `poll` must not hold up a `send`), and a threaded actor may run two calls out of
  order, so commands are put on the loop's queue in the caller's numbering, a late one waiting
  for those before it (a `cancel` never overtakes its `submit`, audio keeps its order).
- `poll(wait_s)`: everything the loop sent back since the last poll (events, answers, stats),
  waiting up to `wait_s` for the first. One call carries many events: audio crosses as numpy
  arrays inside Ray's reply, with no object-store round trip for chunk-sized arrays.
- `start(timeout_s)`: waits until the engine is built and warmed up; its facts, or the reason
  it could not start.

Ray is imported here and in engine/ray_engine.py only; nothing else of Voxgate imports either
unless `--replicas` is given.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import threading
from typing import Any

from engine.api import Command
from engine.engine_host import EngineSpec, Ready, StartFailed, host_main

POLL_BATCH = 256  # messages one poll carries at most (the rest wait for the next)


class ReplicaHost:
    """The actor's body (ray.remote wraps it in `replica_actor`)."""

    def __init__(self, spec: EngineSpec) -> None:
        self._commands: queue.Queue = queue.Queue()
        self._events: queue.Queue = queue.Queue()
        self._next_seq = 0
        self._early: dict[int, tuple[Command, int | None]] = {}
        self._order = threading.Lock()
        self._thread = threading.Thread(
            target=host_main,
            args=(_local_spec(spec), self._commands, self._events),
            name="voxgate-engine",
            daemon=True,
        )
        self._thread.start()

    def start(self, timeout_s: float) -> Ready:
        """The engine's facts once it is built and warmed up; RuntimeError if it failed."""
        try:
            message = self._events.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError("the engine replica did not become ready in time") from None
        if isinstance(message, StartFailed):
            raise RuntimeError(f"the engine replica failed to start: {message.reason}")
        return message

    def send(self, seq: int, command: Command, token: int | None) -> None:
        with self._order:
            self._early[seq] = (command, token)
            while self._next_seq in self._early:
                self._commands.put(self._early.pop(self._next_seq))
                self._next_seq += 1

    def poll(self, wait_s: float) -> list[Any]:
        try:
            messages = [self._events.get(timeout=wait_s)]
        except queue.Empty:
            return []
        while len(messages) < POLL_BATCH:
            try:
                messages.append(self._events.get_nowait())
            except queue.Empty:
                break
        return messages

    def stop(self) -> None:
        self._commands.put(None)
        self._thread.join(10.0)

    def where(self) -> dict:
        """The process and machine this replica runs on (logs, tests)."""
        return {"pid": os.getpid(), "host": socket.gethostname()}


def _local_spec(spec: EngineSpec) -> EngineSpec:
    """The spec with the settings left to the engine made concrete here, on the replica's own
    machine and devices (the gateway's may have no GPU); the engine is already in a process
    of its own."""
    from engine.factory import serving_defaults

    config = serving_defaults(spec.config, spec.model)
    return dataclasses.replace(spec, config=dataclasses.replace(config, engine_process=False))


_ACTOR: Any = None


def replica_actor() -> Any:
    """The Ray actor class (made once; importing Ray only when asked)."""
    global _ACTOR
    if _ACTOR is None:
        import ray

        # Threads: a `poll` blocks while `send`s and `start` go on.
        _ACTOR = ray.remote(max_concurrency=4, max_restarts=0)(ReplicaHost)
    return _ACTOR
