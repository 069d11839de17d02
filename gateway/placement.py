"""Which engine replica a new session goes to (no torch, no Ray): decided once, when the session
opens, from each replica's latest stats, and kept for the session's life (its KV, codec state
and duplex slot live on that replica's GPU).

A replica can take a session when the gateway's own admission check passes on it
(gateway/admission.py: ready, KV not fully committed, waiting requests under the cap,
real-time room). Of those, the one with the most headroom wins: the fewest streams in its
engine (running + waiting, but never fewer than the sessions this gateway pinned to it: stats
are up to 50 ms old, so they may not count a session placed a moment ago yet, and may still
count one that just ended), then the fewest sessions already pinned to it (a burst of
sessions opening together would otherwise all see the same idle replica), then the most free
KV pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.api import EngineStats
from gateway.admission import NOT_READY, AdmissionRefusal


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica, as placement sees it."""

    stats: EngineStats
    pinned_sessions: int
    refusal: AdmissionRefusal | None  # why it cannot take a session now, or None

    @property
    def free_kv_blocks(self) -> int:
        s = self.stats
        return s.kv_blocks_total - max(s.kv_blocks_used, s.kv_blocks_reserved)

    def headroom_key(self) -> tuple[int, int, int]:
        """Smaller is more headroom."""
        s = self.stats
        streams = max(s.running + s.waiting, self.pinned_sessions)
        return (streams, self.pinned_sessions, -self.free_kv_blocks)


def pick_replica(loads: Sequence[ReplicaLoad]) -> int | None:
    """The index of the replica with the most headroom among those that can take a session;
    None when none can (the session is refused with 1013)."""
    open_ = [i for i, load in enumerate(loads) if load.refusal is None]
    if not open_:
        return None
    return min(open_, key=lambda i: loads[i].headroom_key())


def pool_refusal(loads: Sequence[ReplicaLoad]) -> AdmissionRefusal | None:
    """Why the pool as a whole refuses a request no replica can take (pick_replica gave None):
    the refusal of the running replica nearest to having room, so the pool's refusal is
    counted under a cause one replica would have given; None when no replica is running
    (the engine is down, not full)."""
    running = [
        load for load in loads if load.refusal is not None and load.refusal.cause != NOT_READY
    ]
    if not running:
        return None
    return min(running, key=ReplicaLoad.headroom_key).refusal
