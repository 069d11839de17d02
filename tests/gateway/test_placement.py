"""Placement of a new session on an engine replica (gateway/placement.py), and the pool's
figures as one engine's (gateway/replica_pool.py: sum_stats). No Ray: the live pool is
tests/scaleout's."""

from __future__ import annotations

import dataclasses

from engine.api import EngineStats, StepTiming
from engine.outputs import AdmissionStats, LoopTotals
from gateway.admission import AdmissionRefusal
from gateway.placement import ReplicaLoad, pick_replica, pool_refusal
from gateway.replica_pool import pooled_realtime_refusal, sum_stats


def stats(running=0, waiting=0, used=0, total=100, reserved=0, refusal="", batch=0, turns=0):
    return EngineStats(
        running=running,
        waiting=waiting,
        kv_blocks_total=total,
        kv_blocks_used=used,
        steps=turns,
        last_step=StepTiming(batch_size=batch),
        stepping=True,
        kv_blocks_reserved=reserved,
        totals=LoopTotals(loop_turns=turns, audio_s=float(turns)),
        realtime_refusal=refusal,
    )


def load(pinned=0, refusal=None, **figures) -> ReplicaLoad:
    return ReplicaLoad(stats(**figures), pinned, refusal)


def test_the_replica_with_the_fewest_streams_wins():
    assert pick_replica([load(running=3), load(running=1, waiting=1), load(running=4)]) == 1


def test_equal_streams_go_to_the_replica_with_fewer_sessions_pinned_then_more_free_kv():
    # A burst of sessions sees the same (up to 50 ms old) stats: the pins spread it.
    assert pick_replica([load(pinned=2), load(pinned=1), load(pinned=3)]) == 1
    assert pick_replica([load(used=40), load(used=10, reserved=30), load(used=20)]) == 2


def test_stale_stats_never_outweigh_the_sessions_pinned_a_moment_ago():
    """Replica 0's stats still count a session that has just ended, and replica 1's do not yet
    count the session pinned to it a moment ago: both carry one stream, and the next session
    goes to replica 0, which has none pinned."""
    assert pick_replica([load(running=1), load(pinned=1)]) == 0
    assert pick_replica([load(running=2), load(pinned=1)]) == 1  # stats that are ahead count


NOT_READY = AdmissionRefusal("not_ready", "the engine is not ready")
KV_FULL = AdmissionRefusal("kv", "the KV cache is fully committed")
NO_ROOM = AdmissionRefusal("listeners", "no real-time room")


def test_a_replica_that_cannot_take_a_session_is_never_picked():
    loads = [load(refusal=NOT_READY), load(running=9), load(refusal=NO_ROOM)]
    assert pick_replica(loads) == 1
    assert pick_replica([load(refusal=NOT_READY), load(refusal=KV_FULL)]) is None
    assert pick_replica([]) is None


def test_the_pool_refuses_with_the_cause_of_the_running_replica_nearest_to_room():
    loads = [
        load(refusal=NOT_READY),
        load(running=9, refusal=KV_FULL),
        load(running=4, refusal=NO_ROOM),
    ]
    assert pool_refusal(loads) == NO_ROOM
    assert pool_refusal([load(refusal=NOT_READY)]) is None  # none running: down, not full
    assert pool_refusal([load(refusal=NOT_READY), load(refusal=KV_FULL)]) == KV_FULL


def test_the_pools_realtime_verdict_is_room_while_any_ready_replica_has_room():
    assert pooled_realtime_refusal([stats(refusal="listeners"), stats()]) == ""
    assert pooled_realtime_refusal([stats(refusal="turn_cost"), stats(refusal="kv")]) == "turn_cost"
    assert pooled_realtime_refusal([]) == "not_ready"


def test_the_pools_figures_add_up_and_room_is_what_the_pool_is_told():
    a = stats(running=2, waiting=1, used=10, total=100, batch=2, turns=5)
    b = stats(running=1, used=30, total=50, reserved=40, batch=7, turns=3)
    pooled = sum_stats([a, b], "listeners")
    assert (pooled.running, pooled.waiting) == (3, 1)
    assert (pooled.kv_blocks_used, pooled.kv_blocks_total, pooled.kv_blocks_reserved) == (
        40,
        150,
        40,
    )
    assert pooled.steps == 8 and pooled.totals.loop_turns == 8 and pooled.totals.audio_s == 8.0
    assert pooled.last_step.batch_size == 7  # the busiest replica's last step
    assert pooled.stepping and not pooled.realtime_room and pooled.realtime_refusal == "listeners"


def test_the_pools_admission_adds_up_with_the_busiest_replicas_turn_cost():
    a = AdmissionStats(streams=10, capacity_streams=50, turn_per_row_s=0.001, refusals={"kv": 1})
    b = AdmissionStats(
        streams=30,
        capacity_streams=40,
        turn_per_row_s=0.002,
        codec_per_audio_s=0.0015,
        short_listeners=2,
        refusals={"kv": 2, "listeners": 4},
    )
    replicas = [dataclasses.replace(stats(), admission=x) for x in (a, b)]
    pooled = sum_stats(replicas, "").admission
    assert (pooled.streams, pooled.capacity_streams, pooled.short_listeners) == (40, 90, 2)
    assert pooled.turn_per_row_s == 0.002 and pooled.codec_per_audio_s == 0.0015
    assert pooled.refusals == {"kv": 3, "listeners": 4}
    # The pool's own refusals at submit (no replica had room) are counted with the replicas'.
    pooled = sum_stats(replicas, "", {"listeners": 2, "waiting": 1}).admission
    assert pooled.refusals == {"kv": 3, "listeners": 6, "waiting": 1}
