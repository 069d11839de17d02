"""The simulator's Orpheus codec (voxbench/realtime_sim.py SimSnac): a stream's tokens become
audio when SNAC's chunk plan lets them out, as the real detokenizer's do, and the loop's time
an arrival takes outside any turn is paid by everyone's clock."""

from __future__ import annotations

import pytest

from voxbench.realtime_sim import (
    ORPHEUS_FACTS,
    ORPHEUS_TOKEN_S,
    RealtimeSim,
    SimCodec,
    SimSnac,
    TurnCost,
)

FAST = TurnCost(fixed_s=2e-3, per_row_s=1e-4)  # a device far ahead of real time


def chunks_heard(sim: RealtimeSim) -> list[float]:
    """Record the seconds of every chunk the scheduler books, in order."""
    heard: list[float] = []
    book = sim.scheduler.audio_out

    def audio_out(request, now, seconds):
        heard.append(seconds)
        book(request, now, seconds)

    sim.scheduler.audio_out = audio_out
    return heard


@pytest.mark.parametrize("codec", [None, SimCodec(5e-3, 1e-4)])
def test_a_streams_audio_comes_out_as_the_snac_plan_lets_it(codec):
    """The first chunk plays its emitted frames less the decoder's held-back samples, every
    later non-final chunk whole frames, and the end flushes the rest: the stream's audio is
    all of its whole frames."""
    snac = SimSnac()
    sim = RealtimeSim(FAST, ORPHEUS_FACTS, codec=codec, snac=snac, realtime_admission=False)
    heard = chunks_heard(sim)
    frames = 40
    sim.run([0.0], frames * snac.frame_tokens, until_s=10.0, retry_s=None)
    frame_s = snac.samples_per_frame / snac.sample_rate
    held_s = (snac.delay_samples - 2 * snac.samples_per_frame) / snac.sample_rate
    first_frames = (heard[0] + held_s) / frame_s
    assert first_frames == pytest.approx(round(first_frames)) and round(first_frames) >= 1
    for seconds in heard[1:-1]:  # whole frames: one or more of the plan's chunks
        assert seconds / frame_s == pytest.approx(round(seconds / frame_s))
    assert sum(heard) == pytest.approx(frames * frame_s)


def test_without_the_plan_every_token_is_audio_at_once():
    sim = RealtimeSim(FAST, ORPHEUS_FACTS, realtime_admission=False)
    heard = chunks_heard(sim)
    sim.run([0.0], 280, until_s=10.0, retry_s=None)
    assert heard[0] > 0.3  # the whole first chunk's tokens, look-ahead included
    assert sum(heard) == pytest.approx(280 * ORPHEUS_TOKEN_S)


def test_an_arrivals_loop_time_delays_everyone():
    """Each arrival's time outside the turns (admission's verdict, the submit) moves the clock:
    the same streams take longer."""

    def last_audio(per_arrival_s: float) -> float:
        cost = TurnCost(fixed_s=2e-3, per_row_s=1e-4, per_arrival_s=per_arrival_s)
        sim = RealtimeSim(cost, ORPHEUS_FACTS, snac=SimSnac(), realtime_admission=False)
        times: list[float] = []
        book = sim.scheduler.audio_out
        sim.scheduler.audio_out = lambda r, now, s: (times.append(now), book(r, now, s))
        sim.run([0.01 * i for i in range(20)], 70, until_s=5.0, retry_s=None)
        return max(times)

    # 20 arrivals 10 ms apart that take 20 ms each: the last one waits ~0.2 s more.
    assert last_audio(0.02) > last_audio(0.0) + 0.2
