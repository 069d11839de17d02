"""Why the engine refuses a new request or session: the causes its refusals are counted under
(`EngineStats.admission.refusals`, `voxgate_engine_admission_refusals_total{cause}`), and that
`EngineStats.realtime_refusal` names while it would refuse one more. The gateway counts its own
refusals under the same names where the engine's figures decided (gateway/admission.py), so
a dashboard reads one vocabulary. A StrEnum: each is its plain string on the wire and in JSON."""

from __future__ import annotations

import enum


class RefusalCause(enum.StrEnum):
    KV = "kv"  # the KV pool cannot hold the request's whole reservation
    TURN_COST = "turn_cost"  # real-time admission: the decode turn would grow past real time
    CODEC = "codec"  # real-time admission: the codec would fall behind real time
    SLOW_START = "slow_start"  # more streams than have yet been heard playing at once, doubled
    LISTENERS = "listeners"  # listeners playing now are running short of audio
    MAX_NUM_SEQS = "max_num_seqs"  # a full-duplex engine steps at most --max-num-seqs sessions
