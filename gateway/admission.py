"""The gateway's admission check: whether the engine can take another session (or HTTP speech
request) now, asked before anything is submitted to it, and why not, by cause.

A refusal here never reaches the engine, so the engine's own count of refusals
(`voxgate_engine_admission_refusals_total`, requests refused at submit) never sees it: the
gateway counts it in `voxgate_gateway_admission_refusals_total{cause}` (gateway/metrics.py).
The causes are the engine's where the engine's figures decide (engine/refusal_causes.py:
`kv`, real-time admission's `turn_cost`, `codec`, `slow_start`, `listeners`, a full-duplex
engine's `max_num_seqs`), plus the gateway's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.api import EngineClient, RefusalCause
from gateway.config import GatewaySettings
from gateway.protocol_codes import ErrorCode

# The gateway's own causes (beside the engine's, which come from EngineStats).
NOT_READY = "not_ready"  # the engine is not running, or is being restarted
WAITING = "waiting"  # max_engine_waiting requests already wait for their first step
MAX_SESSIONS = "max_sessions"  # the server is at --max-sessions (gateway/auth.py)
KEY_SESSIONS = "key_sessions"  # the key is at --max-sessions-per-key (gateway/auth.py)
# Every cause the gateway can count, the engine's real-time ones included: /metrics shows each
# from the start, at 0, so a rate over any window has a series to start from.
GATEWAY_CAUSES = (NOT_READY, WAITING, *RefusalCause, MAX_SESSIONS, KEY_SESSIONS)


@dataclass(frozen=True)
class AdmissionRefusal:
    """Why a session (or request) is refused before it reaches the engine: the cause it is
    counted under, and the words the client gets (error `overloaded`, close 1013)."""

    cause: str
    message: str
    code: ClassVar[ErrorCode] = ErrorCode.OVERLOADED  # the error its client gets


def admission_refusal(
    engine: EngineClient, settings: GatewaySettings, realtime: bool = True
) -> AdmissionRefusal | None:
    """Why the engine cannot take another session now (answered with 1013), or None: the
    server would rather refuse a session than make every session stutter. Asks
    `engine.stats()` only: counting the refusal is the caller's (it may only be asking, as
    replica placement does). A request no one plays as it comes (`realtime` False) needs no
    real-time capacity: only the KV cache and the waiting queue can refuse it."""
    if not engine.ready:
        return AdmissionRefusal(NOT_READY, "the engine is not ready; try again later")
    stats = engine.stats()
    free = stats.kv_blocks_total - max(stats.kv_blocks_used, stats.kv_blocks_reserved)
    if free <= 0 or free < stats.kv_blocks_per_session:
        return AdmissionRefusal(
            RefusalCause.KV, "the engine's KV cache is fully committed; try again later"
        )
    if stats.waiting >= settings.max_engine_waiting:
        return AdmissionRefusal(
            WAITING, f"{stats.waiting} requests are waiting for the engine; try again later"
        )
    if realtime and stats.realtime_refusal:
        return AdmissionRefusal(
            stats.realtime_refusal,
            "the engine has no real-time capacity for another stream now "
            f"({stats.realtime_refusal}); try again later",
        )
    return None
