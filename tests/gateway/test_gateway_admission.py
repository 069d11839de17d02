"""The gateway's admission check (gateway/admission.py): a typed refusal, its cause from the
vocabulary /metrics counts under, checked in order (the engine down first, real-time room
last), on the figures `engine.stats()` gives."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.api import EngineStats, StepTiming
from gateway.admission import GATEWAY_CAUSES, AdmissionRefusal, admission_refusal
from gateway.config import GatewaySettings

SETTINGS = GatewaySettings(max_engine_waiting=4)


@dataclass
class Figures:
    """What the check reads of an engine: whether it is ready, and its stats."""

    ready: bool
    stats_now: EngineStats

    def stats(self) -> EngineStats:
        return self.stats_now


def engine(
    ready=True, used=0, reserved=0, waiting=0, realtime_refusal="", per_session=0
) -> Figures:
    stats = EngineStats(
        running=1,
        waiting=waiting,
        kv_blocks_total=100,
        kv_blocks_used=used,
        steps=0,
        last_step=StepTiming(),
        stepping=ready,
        kv_blocks_reserved=reserved,
        realtime_refusal=realtime_refusal,
        kv_blocks_per_session=per_session,
    )
    return Figures(ready, stats)


def test_room_everywhere_is_no_refusal():
    assert admission_refusal(engine(used=99, waiting=3), SETTINGS) is None


@pytest.mark.parametrize(
    ("figures", "cause", "words"),
    [
        (engine(ready=False), "not_ready", "not ready"),
        (engine(used=100), "kv", "KV cache"),
        (engine(reserved=100), "kv", "KV cache"),
        (engine(waiting=4), "waiting", "4 requests are waiting"),
        (engine(realtime_refusal="listeners"), "listeners", "real-time capacity"),
        (engine(realtime_refusal="turn_cost"), "turn_cost", "real-time capacity"),
    ],
)
def test_each_refusal_has_its_cause_and_says_why(figures, cause, words):
    refusal = admission_refusal(figures, SETTINGS)
    assert isinstance(refusal, AdmissionRefusal)
    assert refusal.cause == cause and cause in GATEWAY_CAUSES
    assert words in refusal.message and refusal.message.endswith("try again later")


def test_a_request_no_one_plays_as_it_comes_needs_no_real_time_room():
    """POST /v1/audio/speech with `realtime: false`: the engine runs it behind the real-time
    streams, so only the KV pool and the queue can refuse it."""
    no_room = engine(realtime_refusal="turn_cost")
    assert admission_refusal(no_room, SETTINGS, realtime=False) is None
    assert admission_refusal(engine(used=100), SETTINGS, realtime=False).cause == "kv"
    assert admission_refusal(engine(waiting=4), SETTINGS, realtime=False).cause == "waiting"


def test_a_session_of_known_size_needs_its_pages_free():
    """A full-duplex engine states the pages a new session reserves (its whole context): the
    session is refused at start while fewer are free, not admitted to fail at submit."""
    assert admission_refusal(engine(reserved=70, per_session=30), SETTINGS) is None
    refused = admission_refusal(engine(reserved=71, per_session=30), SETTINGS)
    assert refused is not None and refused.cause == "kv"
    assert admission_refusal(engine(used=71, reserved=40, per_session=30), SETTINGS).cause == "kv"


def test_the_first_failing_check_names_the_cause():
    """One refusal, one cause: a down engine is `not_ready` whatever its last stats said; a
    full KV pool comes before a long queue, and both before real-time room."""
    everything = dict(used=100, waiting=9, realtime_refusal="codec")
    assert admission_refusal(engine(ready=False, **everything), SETTINGS).cause == "not_ready"
    assert admission_refusal(engine(**everything), SETTINGS).cause == "kv"
    assert admission_refusal(engine(waiting=9, realtime_refusal="codec"), SETTINGS).cause == (
        "waiting"
    )


def test_the_real_time_verdict_is_the_bool_its_readers_know():
    assert engine().stats().realtime_room
    closed = engine(realtime_refusal="slow_start").stats()
    assert not closed.realtime_room and closed.realtime_refusal == "slow_start"
