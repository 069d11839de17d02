"""Engine supervision: a dead engine is replaced by a fresh one, with backoff, and a crash loop
is bounded.

`SupervisedEngine` stands where the engine stands (the gateway's routes and sessions hold it)
and forwards every call to the engine it holds now. A watcher on the gateway's event loop
polls `engine.ready`; once the engine has died (its process killed, its loop raised), it shuts
the dead one down, waits out the backoff and builds a new one with the factory it was given,
which loads the model and warms it up as at start-up. Meanwhile `ready` is False, so new
sessions are refused with 1013 and `/ready` answers 503; sessions that were mid-response were
already told by the dead engine (every open stream ends `failed`) and end with `internal`, 1011.

After `max_failures` deaths (or failed rebuilds) within `window_s` the supervisor stops
trying and `healthy` turns False, so `/health` fails; `GAVE_UP_EXIT_GRACE_S` later the server
process exits with `GAVE_UP_EXIT_STATUS` (`on_gave_up`, `exit_server`), so that whatever runs
it starts it again: a crash loop that a restart in place does not cure is the orchestrator's to
handle, and docker's `restart:` policies act only on an exit.

The engine's counters (steps, loop totals, refusals: gateway/engine_counters.py) carry on
across a restart: the dead engine's last figures are added to the new one's, so /metrics'
counters never go down.

Voices clients add from a clip (POST /v1/voices, session.start's `voice_clip`) live in the
engine, so the supervisor records each one it forwards (gateway/replica_voices.py, as a pool of
one) and gives a rebuilt engine every recorded voice before it serves: a voice added once
outlives an engine restart. In a replica pool the pool records them for all its replicas
(`keep_voices_in`).

It knows the engine only by its public surface (`ready`, `failure`, `shutdown`, and the voice
calls), so it works for any engine kind the factory builds: a thread of this process or a
process of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import multiprocessing as mp
import os
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.engine_counters import EngineCounters
from gateway.replica_voices import ReplicaVoices

log = logging.getLogger("voxgate.supervisor")

# How long the watcher waits, once an engine is no longer ready, for the engine's own account of
# its death (a process engine's reader thread learns the exit status or signal within ~0.5 s).
DEATH_REASON_WAIT_S = 1.0
# Once the supervisor has given up, /health fails for this long before the server process
# exits: long enough for a last scrape of /metrics and a liveness probe to see why.
GAVE_UP_EXIT_GRACE_S = 10.0
# The server's exit status then: non-zero, so that any restart policy (docker's on-failure,
# unless-stopped, always; a systemd unit's on-failure) starts it again.
GAVE_UP_EXIT_STATUS = 1


@dataclass(frozen=True)
class RestartPolicy:
    """How a dead engine is restarted. The first restart waits `backoff_s`, each further
    failure within `window_s` doubles the wait, up to `max_backoff_s`; the `max_failures`-th
    failure within `window_s` ends the attempts."""

    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_failures: int = 5
    window_s: float = 300.0
    poll_s: float = 0.05  # how often the watcher looks at the engine
    shutdown_timeout_s: float = 15.0  # for the dead engine's teardown


class CrashLoop:
    """The failures of the last `window_s` seconds: how long to back off before the next
    restart, and whether to stop trying. Pure bookkeeping on a clock the caller passes."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._failures: deque[float] = deque()

    def record(self, now: float) -> None:
        self._failures.append(now)
        self._forget(now)

    def recent(self, now: float) -> int:
        self._forget(now)
        return len(self._failures)

    def gave_up(self, now: float) -> bool:
        return self.recent(now) >= self.policy.max_failures

    def backoff_s(self, now: float) -> float:
        """The wait before the next restart: doubling with each recent failure."""
        n = max(self.recent(now), 1)
        return min(self.policy.max_backoff_s, self.policy.backoff_s * 2 ** (n - 1))

    def _forget(self, now: float) -> None:
        while self._failures and now - self._failures[0] > self.policy.window_s:
            self._failures.popleft()


@dataclass
class RestartRecord:
    """What `/metrics` shows of the supervisor."""

    restarts: int = 0  # engines built in place of a dead one
    deaths: int = 0  # engines that died while serving
    restart_failures: int = 0  # rebuilds that failed (to build, to load, or to be prepared)
    started_at: float = 0.0  # when the engine serving now became ready (clock of the supervisor)
    last_reason: str = ""  # the last failure, a death's or a failed rebuild's ("" before any)
    last_death: str = ""  # why the last serving engine died ("" before any death)
    last_restart_failure: str = ""  # why the last rebuild failed ("" before any)
    healthy: bool = True  # False once the supervisor has given up
    # When the last death and the last failed rebuild happened (the supervisor's clock; 0.0
    # before any): a replica pool reports the latest of its replicas' (gateway/replica_records.py).
    last_death_at: float = 0.0
    last_restart_failure_at: float = 0.0


class SupervisedEngine:
    """The engine the gateway serves from, restarted when it dies. Build it with
    `await SupervisedEngine.start(factory)`; `factory()` (run on a worker thread) returns a
    started, warmed-up engine or raises."""

    def __init__(
        self,
        factory: Callable[[], Any],
        engine: Any,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._engine = engine
        self.policy = policy or RestartPolicy()
        self._clock = clock
        self._crashes = CrashLoop(self.policy)
        self.record = RestartRecord(started_at=clock())
        self._restarting = False
        self._watcher: asyncio.Task | None = None
        self.facts = engine.facts
        # The counters of the engines this one replaced, added to its own (stats()): a new
        # engine counts from 0, and a Prometheus counter must never go down.
        self._carried = EngineCounters()
        # Clients' voices, recorded as they are added and given to a rebuilt engine.
        self._voices: ReplicaVoices | None = ReplicaVoices([_Serving(self)])
        # Run on a rebuilt engine before it serves (it gives it the clients' voices:
        # gateway/replica_voices.py); its failure is a failed restart.
        self.before_serving: Callable[[Any], Awaitable[None]] | None = self._voices.restore
        # Run once the supervisor has given up: the server process exits after a grace
        # (exit_server). A replica pool exits only once every replica has given up.
        self.on_gave_up: Callable[[], Awaitable[None]] | None = self._exit_server

    @classmethod
    async def start(
        cls, factory: Callable[[], Any], policy: RestartPolicy | None = None
    ) -> SupervisedEngine:
        """Build the first engine (its failure is the caller's: a start-up error) and watch it."""
        engine = await asyncio.to_thread(factory)
        supervised = cls(factory, engine, policy)
        supervised.watch()
        return supervised

    def watch(self) -> None:
        """Start the watcher on the running event loop (start() and an app's lifespan do)."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="voxgate-engine-supervisor")

    # --- what the gateway reads ---------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The engine serving now (or the dead one, until it is replaced)."""
        return self._engine

    @property
    def ready(self) -> bool:
        return not self._restarting and self.record.healthy and self._engine.ready

    @property
    def healthy(self) -> bool:
        """False once the supervisor has given up: the server cannot recover on its own."""
        return self.record.healthy

    @property
    def restarting(self) -> bool:
        return self._restarting

    def keep_voices_in(self, restore: Callable[[Any], Awaitable[None]]) -> None:
        """Clients' voices are recorded above this engine (a replica pool records them for all
        its replicas): adds and removals pass straight to the engine, and `restore` gives a
        rebuilt one the voices before it serves."""
        self._voices = None
        self.before_serving = restore

    def seconds_since_start(self) -> float:
        """Seconds since the engine serving now became ready (its first start, or the last
        restart)."""
        return self._clock() - self.record.started_at

    # --- the engine's surface, forwarded -------------------------------------------------------
    async def submit(self, request):
        return await self._engine.submit(request)

    def cancel(self, request_id: str) -> None:
        self._engine.cancel(request_id)

    def report_playback(self, request_id: str, played_s: float) -> None:
        self._engine.report_playback(request_id, played_s)

    def push_audio(self, request_id: str, pcm) -> None:
        self._engine.push_audio(request_id, pcm)

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        self._engine.append_text(request_id, text, final)

    def end_session(self, request_id: str) -> None:
        self._engine.end_session(request_id)

    def end_conversation(self, conversation_id: str) -> None:
        self._engine.end_conversation(conversation_id)

    async def add_clip_voice(self, name: str, clip) -> int:
        """Encode a client's voice in the engine and record it, so that a rebuilt engine gets it
        again. Raises EngineDead while the engine is being restarted."""
        if self._voices is None:
            return await self._engine.add_clip_voice(name, clip)
        return await self._voices.add(name, clip)

    def remove_clip_voice(self, name: str) -> None:
        if self._voices is None:
            self._engine.remove_clip_voice(name)
        else:
            self._voices.remove(name)

    def stats(self):
        """The engine's stats, its counters carried on from the engines it replaced."""
        return self._carried.onto(self._engine.stats())

    def __getattr__(self, name: str) -> Any:
        # Anything else of the engine's surface (e.g. `core` of an in-process engine).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._engine, name)

    async def stop_watching(self) -> None:
        """Stop the watcher (an app's lifespan ends; the engine itself keeps running)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None

    async def shutdown(self) -> None:
        await self.stop_watching()
        await self._engine.shutdown()

    # --- the watcher ---------------------------------------------------------------------------
    async def _watch(self) -> None:
        while self.record.healthy:
            await asyncio.sleep(self.policy.poll_s)
            if not self._engine.ready:
                await self._recover(await self._death_reason(self._engine))
        if self.on_gave_up is not None:
            await self.on_gave_up()

    async def _exit_server(self) -> None:
        await exit_server(f"the engine kept dying (last: {self.record.last_reason})")

    async def _death_reason(self, engine: Any) -> str:
        """The dead engine's own account of its death (its `failure`), waited for briefly: a
        process engine's reader thread sets it a moment after the process is gone."""
        waited = 0.0
        while not getattr(engine, "failure", None) and waited < DEATH_REASON_WAIT_S:
            await asyncio.sleep(self.policy.poll_s)
            waited += self.policy.poll_s
        failure = getattr(engine, "failure", None)
        return str(failure) if failure else "the engine stopped without saying why"

    def _record_death(self, reason: str) -> None:
        self.record.deaths += 1
        self.record.last_death = self.record.last_reason = reason
        self.record.last_death_at = self._clock()
        log.error("engine died (%s); restarting it", reason)

    def _record_restart_failure(self, reason: str) -> None:
        self.record.restart_failures += 1
        self.record.last_restart_failure = self.record.last_reason = f"restart failed: {reason}"
        self.record.last_restart_failure_at = self._clock()
        log.error("%s", self.record.last_reason)

    async def _recover(self, reason: str) -> None:
        """Replace the dead engine, backing off between attempts; give up in a crash loop."""
        self._restarting = True
        try:
            self._record_death(reason)
            dead, self._engine = self._engine, _Stopped(self.facts, self._engine.stats(), reason)
            await self._dispose(dead)
            del dead  # its memory (a KV cache on the GPU) must be free before the next one sizes
            while True:
                now = self._clock()
                self._crashes.record(now)
                if self._crashes.gave_up(now):
                    self.record.healthy = False
                    log.error(
                        "engine failed %d times in %.0f s; not restarting it again (last death: "
                        "%s; last failed restart: %s). /health now fails: restart the server",
                        self.policy.max_failures,
                        self.policy.window_s,
                        self.record.last_death,
                        self.record.last_restart_failure or "none",
                    )
                    return
                await asyncio.sleep(self._crashes.backoff_s(now))
                gc.collect()  # cycles that still held the dead engine's memory
                try:
                    engine = await asyncio.to_thread(self._factory)
                except Exception as exc:  # noqa: BLE001 - counted as a failure, retried
                    self._record_restart_failure(f"{type(exc).__name__}: {exc}")
                    continue
                if not await self._prepare(engine):
                    continue
                # The stand-in holds the dead engine's last stats: its counters carry on.
                self._carried = self._carried + EngineCounters.of(self._engine.stats())
                self._engine = engine
                self.record.restarts += 1
                self.record.started_at = self._clock()
                log.warning("engine restarted (%d so far); serving again", self.record.restarts)
                return
        finally:
            self._restarting = False

    async def _prepare(self, engine: Any) -> bool:
        """Run `before_serving` on a rebuilt engine; False (the engine disposed of, the
        failure recorded) when it fails."""
        if self.before_serving is None:
            return True
        try:
            await self.before_serving(engine)
        except Exception as exc:  # noqa: BLE001 - counted as a failure, retried
            self._record_restart_failure(f"preparing the new engine: {type(exc).__name__}: {exc}")
            await self._dispose(engine)
            return False
        return True

    async def _dispose(self, engine: Any) -> None:
        """Shut the dead engine down (its open streams end `failed`)."""
        try:
            await asyncio.wait_for(engine.shutdown(), self.policy.shutdown_timeout_s)
        except Exception:  # noqa: BLE001 - a dead engine may fail to shut down; it is dropped
            log.warning("the dead engine did not shut down cleanly", exc_info=True)


async def exit_server(why: str) -> None:
    """End a server that cannot recover on its own: /health has failed since the supervisor
    gave up; after GAVE_UP_EXIT_GRACE_S more (a last scrape and a liveness probe see it), the
    process exits with GAVE_UP_EXIT_STATUS and one log line saying why, so that whatever runs
    it (docker compose's `restart:`, Kubernetes, systemd) starts it again. Cancelled (the
    server is being stopped meanwhile), it does nothing."""
    await asyncio.sleep(GAVE_UP_EXIT_GRACE_S)
    log.critical(
        "exiting with status %d: %s, and the supervisor gave up restarting it in place; the "
        "container or service manager must start the server again",
        GAVE_UP_EXIT_STATUS,
        why,
    )
    _exit_process(GAVE_UP_EXIT_STATUS)


def _exit_process(status: int) -> None:
    """Exit now, from the event loop, whatever the server's shutdown path would wait for: the
    engine is dead already; the codec worker processes are stopped first and the log lines
    flushed."""
    for child in mp.active_children():
        child.terminate()
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class _Serving:
    """The supervised engine as its voice record sees it: a replica of one that serves while
    the supervisor does, whose voice calls reach the engine held now (the record itself is
    the supervisor's `add_clip_voice`, so it must not be called back)."""

    def __init__(self, supervisor: SupervisedEngine) -> None:
        self._supervisor = supervisor

    @property
    def ready(self) -> bool:
        return self._supervisor.ready

    async def add_clip_voice(self, name: str, clip) -> int:
        return await self._supervisor.engine.add_clip_voice(name, clip)

    def remove_clip_voice(self, name: str) -> None:
        self._supervisor.engine.remove_clip_voice(name)


class _Stopped:
    """Stands in for the engine between a death and the next start: not ready, its last
    stats, and nothing to cancel (the dead engine's requests are gone with it)."""

    def __init__(self, facts: Any, last_stats: Any, reason: str) -> None:
        self.facts = facts
        self.failure = reason
        self._stats = dataclasses.replace(
            last_stats,
            stepping=False,
            running=0,
            waiting=0,
            kv_blocks_used=0,
            kv_blocks_reserved=0,
            kv_blocks_kept=0,
        )

    ready = False

    async def submit(self, request):
        raise RuntimeError("the engine is not running: it is being restarted")

    def cancel(self, request_id: str) -> None:
        pass

    def report_playback(self, request_id: str, played_s: float) -> None:
        pass

    def push_audio(self, request_id: str, pcm) -> None:
        pass

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        pass

    def end_session(self, request_id: str) -> None:
        pass

    def end_conversation(self, conversation_id: str) -> None:
        pass

    async def add_clip_voice(self, name: str, clip) -> int:
        raise RuntimeError("the engine is not running: it is being restarted")

    def remove_clip_voice(self, name: str) -> None:
        pass  # its voices died with it

    def stats(self):
        return self._stats

    async def shutdown(self) -> None:
        pass
