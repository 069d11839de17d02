"""Several engine replicas behind one gateway (`voxgate serve --replicas N`), each supervised on
its own (gateway/supervisor.py: a dead replica is rebuilt with backoff, a crash loop bounded).

The pool stands where one engine stands (an `EngineClient`), plus `place()`: a WebSocket
session is pinned when it opens to the replica with the most headroom (gateway/placement.py)
and talks to that replica alone for its life; a replica that dies fails only its own sessions'
streams, and new sessions go to the others until it is back. Calls made on the pool itself
(the HTTP speech route, `voxgate synth`) place each request on its own and route its later
commands to the replica that serves it. Voices clients add from clips go to every replica
(gateway/replica_voices.py), so a session in one may be placed anywhere.

The pool knows replicas only as supervised `EngineClient`s: it imports no Ray
(gateway/ray_cluster.py builds one from Ray actors).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from engine.api import (
    AdmissionStats,
    EngineDead,
    EngineOverloaded,
    EngineStats,
    ModelFacts,
    ResponseStream,
    SpeechRequest,
    StepTiming,
    TurnCommand,
    VoiceClip,
)
from gateway.admission import NOT_READY, admission_refusal
from gateway.config import GatewaySettings
from gateway.engine_counters import add_refusals, add_totals
from gateway.placement import ReplicaLoad, pick_replica, pool_refusal
from gateway.replica_records import pooled_record
from gateway.replica_voices import ReplicaVoices
from gateway.supervisor import RestartRecord, SupervisedEngine, exit_server


class ReplicaPool:
    def __init__(
        self,
        replicas: Sequence[SupervisedEngine],
        names: Sequence[str],
        settings: GatewaySettings,
        on_shutdown: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        if not replicas:
            raise ValueError("a replica pool needs at least one replica")
        self.replicas = list(replicas)
        self.names = list(names)
        self.pinned = [0] * len(replicas)  # open sessions pinned to each replica
        self._settings = settings
        self._on_shutdown = on_shutdown
        self.facts: ModelFacts = replicas[0].facts
        # Requests the pool itself refused at submit (no replica had room), by the cause of the
        # replica nearest to room: no replica saw them, so none counted them.
        self.refusals: dict[str, int] = {}
        # Clients' voices: on every replica, and on a rebuilt one before it serves.
        self.voices = ReplicaVoices(self.replicas)
        for replica in self.replicas:
            replica.keep_voices_in(self.voices.restore)
            replica.on_gave_up = self._exit_once_none_recovers

    # --- placement -----------------------------------------------------------------------------
    def loads(self, realtime: bool = True) -> list[ReplicaLoad]:
        """Each replica as placement sees it. `realtime` False: for a request no one plays as
        it comes, which real-time admission never refuses (gateway/admission.py)."""
        return [
            ReplicaLoad(r.stats(), n, admission_refusal(r, self._settings, realtime))
            for r, n in zip(self.replicas, self.pinned, strict=True)
        ]

    def pick(self) -> int | None:
        return pick_replica(self.loads())

    @contextlib.contextmanager
    def place(self) -> Iterator[SupervisedEngine]:
        """The replica a new session is pinned to, for as long as the block runs. When none
        can take it, a replica is still given: the session's own admission check then refuses
        it (1013), with that replica's reason."""
        index = self.pick()
        if index is None:
            index = min(range(len(self.replicas)), key=lambda i: self.pinned[i])
        self.pinned[index] += 1
        try:
            yield self.replicas[index]
        finally:
            self.pinned[index] -= 1

    # --- the engine surface --------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True while any replica serves."""
        return any(r.ready for r in self.replicas)

    @property
    def healthy(self) -> bool:
        """False once every replica's supervisor has given up."""
        return any(r.healthy for r in self.replicas)

    @property
    def restarting(self) -> bool:
        return any(r.restarting for r in self.replicas)

    @property
    def record(self) -> RestartRecord:
        """The replicas' supervision as one supervisor's (the `voxgate_engine_*` supervision
        metrics): deaths and restarts added up, the latest death named by its replica."""
        return pooled_record(self.names, [r.record for r in self.replicas])

    def seconds_since_start(self) -> float:
        """Seconds since a replica last became ready (the pool's start, or its latest restart)."""
        return min(r.seconds_since_start() for r in self.replicas)

    async def submit(self, request: SpeechRequest) -> ResponseStream:
        # Judged as the request's own engine would judge it: one no one plays as it comes
        # (`realtime` False) runs in the room real-time streams leave, so a pool whose replicas
        # have no real-time room still takes it.
        loads = self.loads(request.realtime)
        index = pick_replica(loads)
        if index is None:
            refusal = pool_refusal(loads)
            if refusal is None:
                raise EngineDead("no engine replica is running")
            self.refusals[refusal.cause] = self.refusals.get(refusal.cause, 0) + 1
            raise EngineOverloaded(
                "no engine replica has room for another request now; the nearest to room: "
                + refusal.message
            )
        return await self.replicas[index].submit(request)

    async def prepare_turn(self, command: TurnCommand) -> Any:
        for replica in self.replicas:
            if replica.ready:
                return await replica.prepare_turn(command)
        raise EngineDead("no engine replica is running")

    async def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """Every replica gets the voice (gateway/replica_voices.py): any may serve its sessions."""
        return await self.voices.add(name, clip)

    def remove_clip_voice(self, name: str) -> None:
        self.voices.remove(name)

    def _serving(self, request_id: str) -> SupervisedEngine | None:
        for replica in self.replicas:
            serves = getattr(replica.engine, "serves", None)
            if serves is not None and serves(request_id):
                return replica
        return None  # finished already (or its replica died): nothing left to tell

    def cancel(self, request_id: str) -> None:
        if (replica := self._serving(request_id)) is not None:
            replica.cancel(request_id)

    def report_playback(self, request_id: str, played_s: float) -> None:
        if (replica := self._serving(request_id)) is not None:
            replica.report_playback(request_id, played_s)

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None:
        if (replica := self._serving(request_id)) is not None:
            replica.push_audio(request_id, pcm)

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        if (replica := self._serving(request_id)) is not None:
            replica.append_text(request_id, text, final)

    def end_session(self, request_id: str) -> None:
        if (replica := self._serving(request_id)) is not None:
            replica.end_session(request_id)

    def end_conversation(self, conversation_id: str) -> None:
        for replica in self.replicas:  # a conversation's kept KV is on one of them
            replica.end_conversation(conversation_id)

    def stats(self) -> EngineStats:
        """Every replica's figures added up, the pool's own refusals with theirs (real-time
        room: some ready replica has room)."""
        stats = [r.stats() for r in self.replicas]
        ready = [s for r, s in zip(self.replicas, stats, strict=True) if r.ready]
        return sum_stats(stats, pooled_realtime_refusal(ready), self.refusals)

    # --- lifecycle -----------------------------------------------------------------------------
    async def _exit_once_none_recovers(self) -> None:
        """A replica's supervisor gave up: the others serve on, but once every one has given
        up (/health fails) the server exits, as with one engine (gateway/supervisor.py)."""
        if not self.healthy:
            await exit_server("every engine replica kept dying")

    def watch(self) -> None:
        for replica in self.replicas:
            replica.watch()

    async def stop_watching(self) -> None:
        await asyncio.gather(*(r.stop_watching() for r in self.replicas))

    async def shutdown(self) -> None:
        await asyncio.gather(*(r.shutdown() for r in self.replicas), return_exceptions=True)
        if self._on_shutdown is not None:
            done = self._on_shutdown()
            if done is not None:
                await done


_SUMMED = (
    "running",
    "waiting",
    "kv_blocks_total",
    "kv_blocks_used",
    "steps",
    "kv_blocks_reserved",
    "prefix_reused_tokens",
    "kv_blocks_kept",
)


def pooled_realtime_refusal(ready: Sequence[EngineStats]) -> str:
    """The pool's real-time verdict from its ready replicas' stats: "" (room) while any has
    room, else the first one's cause; `not_ready` when none is ready."""
    if any(s.realtime_room for s in ready):
        return ""
    return ready[0].realtime_refusal if ready else NOT_READY


def sum_stats(
    stats: Sequence[EngineStats],
    realtime_refusal: str,
    own_refusals: Mapping[str, int] | None = None,
) -> EngineStats:
    """Replicas' stats as one engine's: counts added up, the loop totals added up, the last
    step of the replica with the largest batch; stepping while any steps; the real-time
    verdict the pool is told; refusals by cause, the pool's own (`own_refusals`) added."""
    busiest = max(stats, key=lambda s: s.last_step.batch_size, default=None)
    return EngineStats(
        **{name: sum(getattr(s, name) for s in stats) for name in _SUMMED},
        last_step=busiest.last_step if busiest is not None else StepTiming(),
        stepping=any(s.stepping for s in stats),
        totals=add_totals(s.totals for s in stats),
        realtime_refusal=realtime_refusal,
        admission=sum_admission([s.admission for s in stats], own_refusals),
        kv_blocks_per_session=max((s.kv_blocks_per_session for s in stats), default=0),
    )


def sum_admission(
    replicas: Sequence[AdmissionStats], own_refusals: Mapping[str, int] | None = None
) -> AdmissionStats:
    """Replicas' real-time admission as one engine's: streams, capacities, listeners and
    refusals added up (with the pool's own, `own_refusals`); the turn and codec costs of
    the replica with the most streams."""
    busiest = max(replicas, key=lambda a: a.streams, default=AdmissionStats())
    refusals = add_refusals([*(a.refusals for a in replicas), own_refusals or {}])
    return AdmissionStats(
        streams=sum(a.streams for a in replicas),
        capacity_streams=sum(a.capacity_streams for a in replicas),
        turn_fixed_s=busiest.turn_fixed_s,
        turn_per_row_s=busiest.turn_per_row_s,
        turn_per_page_s=busiest.turn_per_page_s,
        live_turns=sum(a.live_turns for a in replicas),
        codec_fixed_s=busiest.codec_fixed_s,
        codec_per_audio_s=busiest.codec_per_audio_s,
        settled_listeners=sum(a.settled_listeners for a in replicas),
        short_listeners=sum(a.short_listeners for a in replicas),
        tokens_per_char=busiest.tokens_per_char,
        length_samples=sum(a.length_samples for a in replicas),
        refusals=refusals,
    )


def replica_counts(pool: ReplicaPool) -> dict[str, int]:
    """What /ready says of the replicas."""
    return {"ready": sum(r.ready for r in pool.replicas), "total": len(pool.replicas)}
