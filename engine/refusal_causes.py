"""Why the engine refuses a new request or session: the causes its refusals are counted under
(`EngineStats.admission.refusals`, `voxgate_engine_admission_refusals_total{cause}`), and that
`EngineStats.realtime_refusal` names while it would refuse one more. The gateway counts its own
refusals under the same names where the engine's figures decided (gateway/admission.py), so
a dashboard reads one vocabulary. A StrEnum: each is its plain string on the wire and in JSON.
`Admission` is the decision that carries a cause: the KV pool's, real-time admission's and the
scheduler's, one type."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.realtime_outlook import OutlookInputs


class RefusalCause(enum.StrEnum):
    KV = "kv"  # the KV pool cannot hold the request's whole reservation
    TURN_COST = "turn_cost"  # real-time admission: the decode turn would grow past real time
    CODEC = "codec"  # real-time admission: the codec would fall behind real time
    SLOW_START = "slow_start"  # more streams than have yet been heard playing at once, doubled
    LISTENERS = "listeners"  # listeners playing now are running short of audio
    MAX_NUM_SEQS = "max_num_seqs"  # a full-duplex engine steps at most --max-num-seqs sessions


@dataclass(frozen=True)
class Admission:
    """Whether a request (or one more stream) is admitted; if not, why: the words its client
    gets, the cause it is counted under, and where real-time admission's outlook refused it,
    what the outlook read (a request trace keeps it: engine/request_trace.py)."""

    ok: bool
    reason: str = ""
    cause: str = ""  # a RefusalCause; "" for an admission
    outlook: OutlookInputs | None = None
