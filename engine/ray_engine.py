"""`RayEngine`: an `EngineClient` (engine/api.py) for one engine replica running as a Ray actor
(engine/ray_replica.py), on this machine or another node of the cluster.

Commands go out as numbered actor calls (`send`, never awaited: Ray delivers them, the replica
puts them in order), one call for all those of one turn of the gateway's event loop (a
`CommandBatch`, engine/engine_host.py: a full-duplex session pushes audio every 80 ms, and a
call each would take the GIL from the replica too often); one reader thread here long-polls
the replica (`poll`), and what comes back is handled exactly as the process engine's queue
(engine/engine_host.py: HostedClient). When the replica's process dies (killed, out of memory,
its node lost) the pending poll fails at once: every open stream ends `failed` and every later
call gets EngineDead, as for a dead engine process, and `ready` turns False so that the
gateway's supervisor builds a new replica. When only its engine process dies, the replica says
so (`Crashed`), with the same outcome.

Imports Ray: only the scale-out path (gateway/ray_cluster.py) imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from engine.engine_host import CommandBatch, EngineSpec, HostedClient
from engine.ray_replica import replica_actor, replica_concurrency
from engine.request import ConfigError

log = logging.getLogger("voxgate.engine")

POLL_WAIT_S = 0.5  # a poll's longest wait for the first message; the next one follows at once


def actor_name(name: str) -> str:
    """A shared replica's name in Ray (`voxgate-replica-0` …), within its server's namespace
    (--ray-namespace: each server's own, so that servers on one cluster never collide)."""
    return f"voxgate-{name}"


@dataclass(frozen=True)
class ReplicaResources:
    """What Ray reserves for a replica: its GPUs (0 on a CPU machine) and CPUs."""

    gpus: float = 0.0
    cpus: float = 1.0


class RayEngine(HostedClient):
    def __init__(self, actor: Any, name: str, owner: bool = True) -> None:
        super().__init__()
        self.name = name
        self.client_id = uuid.uuid4().hex  # this process's side of a replica others may share
        self._actor = actor
        self._owner = owner  # it made the actor, and stops it; else it only detaches
        self._seq = itertools.count()  # taken under the batch lock: in the order sent
        self._reader: threading.Thread | None = None
        self._stopping = False
        self.where: dict = {}

    @classmethod
    def start(
        cls,
        spec: EngineSpec,
        resources: ReplicaResources,
        name: str,
        start_timeout_s: float | None = None,
        namespace: str | None = None,
        callers: int = 1,
    ) -> RayEngine:
        """Place a new replica on the cluster and wait until its engine is warmed up (raises
        RuntimeError with the replica's reason when it cannot start). `namespace`: named in
        this Ray namespace, for other gateway processes of the same server to `attach` to
        (None: unnamed, this process's alone); `callers`: how many processes will poll it
        (this one included), each needing a thread of the actor's (`replica_concurrency`).
        `start_timeout_s`: None, the engine's own (EngineConfig.engine_start_timeout_s)."""
        if start_timeout_s is None:
            start_timeout_s = spec.config.engine_start_timeout_s
        options: dict[str, Any] = dict(
            num_gpus=resources.gpus,
            num_cpus=resources.cpus,
            max_concurrency=replica_concurrency(callers),
        )
        if namespace is not None:  # other gateway processes find it by name (`attach`)
            options.update(name=actor_name(name), namespace=namespace)
        try:
            handle = replica_actor().options(**options).remote(spec)
        except ValueError as exc:  # Ray's ActorAlreadyExistsError is one: the name is taken
            if namespace is None:
                raise
            raise ConfigError(
                f"engine replica {name} cannot be named {actor_name(name)} in Ray namespace "
                f"{namespace}: {exc}. At start-up, another voxgate serve on this Ray cluster "
                "has the same --ray-namespace: give each server its own, or leave it unset (each "
                "server then makes one of its own); in a restart, the replica's previous actor "
                "is not gone yet, and the restart is tried again"
            ) from None
        engine = cls(handle, name)
        try:
            # The actor may first wait for a free GPU (or CPUs): that counts against the timeout.
            ready = ray.get(handle.start.remote(start_timeout_s), timeout=start_timeout_s)
            engine.where = ray.get(handle.where.remote())
        except GetTimeoutError:
            ray.kill(handle)
            raise RuntimeError(
                f"engine replica {name} was not placed and warmed up within {start_timeout_s:g} "
                f"s: the cluster may have no free {resources.gpus:g} GPU / {resources.cpus:g} "
                "CPU for it (`ray status` shows what it has)"
            ) from None
        except RayError as exc:
            ray.kill(handle)
            raise RuntimeError(_cause(exc)) from None
        engine._serve(ready)
        return engine

    @classmethod
    def attach(cls, name: str, namespace: str, start_timeout_s: float) -> RayEngine:
        """The shared replica `name` another process of this server started in its Ray
        `namespace` (gateway processes on one port): waits until it exists and is warmed up,
        up to `start_timeout_s` (the engine's engine_start_timeout_s). Its owner restarts it
        when it dies; this process attaches again (its supervisor calls this as its
        factory)."""
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                handle = ray.get_actor(actor_name(name), namespace=namespace)
                ready = ray.get(handle.start.remote(start_timeout_s), timeout=start_timeout_s)
                break
            except (ValueError, RayError) as exc:  # not there (yet), or died meanwhile
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"engine replica {name} is not there in Ray namespace {namespace}: {exc}"
                    ) from None
                time.sleep(0.5)
        engine = cls(handle, name, owner=False)
        engine.where = ray.get(handle.where.remote())
        engine._serve(ready)
        return engine

    def _serve(self, ready: Any) -> None:
        self.facts, self._stats = ready.facts, ready.stats
        self._reader = threading.Thread(
            target=self._read, name=f"voxgate-{self.name}-events", daemon=True
        )
        self._reader.start()
        where = self.where
        log.info("engine replica %s ready (pid %s on %s)", self.name, where["pid"], where["host"])

    @property
    def ready(self) -> bool:
        return self.facts is not None and self.failure is None and not self._stopping

    def _send_batch(self, batch: CommandBatch) -> None:
        # Numbered in the order sent (HostedClient sends under its lock); Ray may deliver the
        # calls out of that order, the replica puts them back in it.
        self._actor.send.remote(self.client_id, next(self._seq), batch)

    async def shutdown(self) -> None:
        self._flush()  # commands of this turn before the detach or stop
        self._stopping = True
        if not self._owner:  # another process's replica: leave it serving the others
            with contextlib.suppress(RayError):
                await asyncio.to_thread(
                    ray.get, self._actor.detach.remote(self.client_id), timeout=15.0
                )
            self._fail_all("the gateway was shut down")
            return
        if self.failure is None:
            with contextlib.suppress(RayError):  # already gone: killed below all the same
                await asyncio.to_thread(ray.get, self._actor.stop.remote(), timeout=15.0)
        ray.kill(self._actor, no_restart=True)
        self._fail_all("the engine replica was shut down")

    # --- the reader thread -------------------------------------------------------------------
    def _read(self) -> None:
        while not self._stopping:
            try:
                messages = ray.get(self._actor.poll.remote(self.client_id, POLL_WAIT_S))
            except RayError as exc:
                if not self._stopping:
                    # The first reason stands: a replica whose engine crashed (Crashed) is then
                    # killed by its owner, and that kill must not become the reason.
                    self.failure = self.failure or f"engine replica {self.name} died: {_cause(exc)}"
                    log.error("%s", self.failure)
                    self._fail_all(self.failure)
                return
            for message in messages:
                self._handle(message)


def _cause(exc: BaseException) -> str:
    """Ray's error, in one line (its messages carry whole tracebacks)."""
    cause = getattr(exc, "cause", None)
    text = str(cause if cause is not None else exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
