"""Real-time admission from measured costs (engine/realtime_capacity.py, the scheduler's
admit): no torch, costs given as a warm-up or live steps would report them."""

from __future__ import annotations

import asyncio

import pytest

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.realtime_capacity import CostCurve, RealtimeCapacity
from engine.request import Request, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler

TOKEN_S = 0.04  # voxgate-tiny's 25 tokens a second
FACTS = ChunkingFacts(first_chunk_tokens=4, chunk_tokens=8, seconds_per_token=TOKEN_S)


def make_scheduler(threaded_codec: bool = False, **overrides) -> Scheduler:
    config = EngineConfig(**overrides)
    return Scheduler(config, BlockManager(num_blocks=4096, block_size=16), FACTS, threaded_codec)


def burst(sched: Scheduler, count: int) -> tuple[int, str]:
    """`count` requests arriving at once: how many were admitted, and the last refusal."""
    admitted, reason = 0, ""
    for i in range(count):
        decision = sched.admit(Request([1] * 8, SamplingParams(max_tokens=50), 0.001 * i))
        if decision.ok:
            admitted += 1
        else:
            reason = decision.reason
    return admitted, reason


def test_cost_curve_interpolates_and_extrapolates_from_measured_sizes():
    curve = CostCurve()
    assert curve.predict(4) is None  # nothing measured: cannot judge
    curve.observe(4, 0.010)
    assert curve.predict(4) == 0.010
    assert curve.predict(8) == pytest.approx(0.020)  # one point: proportional to size
    assert curve.predict(2) == 0.010  # below the smallest: no cheaper than it
    curve.observe(8, 0.014)
    assert curve.predict(6) == pytest.approx(0.012)  # between: linear
    assert curve.predict(16) == pytest.approx(0.022)  # past the largest: the last slope
    curve.observe(8, 0.024)  # live steps move a size's figure (a running mean)
    assert 0.014 < curve.predict(8) < 0.024
    curve.set(8, 0.030)  # a calibration replaces it
    assert curve.predict(8) == 0.030


def test_a_burst_is_cut_at_the_size_that_would_fall_behind():
    """Calibrated at 1, 4 and 8 streams: 0.9 x 40 ms is reached at 6 streams (interpolated);
    the seventh of a burst is refused before any step has run at that size."""
    sched = make_scheduler()
    for size, cost in ((1, 0.3 * TOKEN_S), (4, 0.6 * TOKEN_S), (8, 1.2 * TOKEN_S)):
        sched.capacity.steps.set(size, cost)
    admitted, reason = burst(sched, 24)
    assert admitted == 6
    assert "7 streams would get a token every" in reason and "try again" in reason


def test_streams_beyond_max_num_seqs_wait_whole_steps():
    sched = make_scheduler(max_num_seqs=4)
    sched.capacity.steps.set(4, 0.4 * TOKEN_S)
    assert burst(sched, 20)[0] == 8  # 2 steps a token = 0.8; a ninth makes it 3 steps


def test_live_steps_refine_the_calibration():
    """A calibration that was too hopeful (the gateway's own work shares the cores) is
    corrected by the decode steps that follow: fewer streams are admitted after them."""
    sched = make_scheduler()
    sched.capacity.steps.set(1, 0.2 * TOKEN_S)
    sched.capacity.steps.set(16, 0.6 * TOKEN_S)
    assert burst(sched, 40)[0] == 27  # extrapolated: 0.9 is reached at 27 streams
    live = make_scheduler()
    live.capacity.steps.set(1, 0.2 * TOKEN_S)
    live.capacity.steps.set(16, 0.6 * TOKEN_S)
    for _ in range(20):
        live.observe_step(16, 1.1 * TOKEN_S)
    live.busy_step_s = None  # the engine went idle since: the table alone judges
    assert burst(live, 40)[0] == 12


def test_a_codec_beside_the_llm_has_its_own_budget():
    """With a threaded codec, each stream needs a chunk (8 tokens, 320 ms) per chunk of audio;
    jobs of up to max_detok_batch rows: 4 rows at 100 ms, so 2 jobs (8 streams) fit in
    0.9 x 320 ms and 3 jobs do not."""
    sched = make_scheduler(threaded_codec=True, max_detok_batch=4)
    sched.capacity.steps.set(1, 0.1 * TOKEN_S)
    sched.capacity.steps.set(64, 0.2 * TOKEN_S)
    sched.observe_codec_job(4, 0.100)
    admitted, reason = burst(sched, 20)
    assert admitted == 8 and "the codec would take" in reason


def test_admission_is_on_by_default_and_off_only_when_asked():
    on = RealtimeCapacity(TOKEN_S, 8, 128, 64, threaded_codec=False)
    assert on.room_for(1000).ok  # an engine never measured: the KV pool decides
    for config in ({}, {"realtime_admission": None}):  # None: the command line's "not given"
        sched = make_scheduler(**config)
        sched.capacity.steps.set(1, 2 * TOKEN_S)
        assert burst(sched, 3)[0] == 1  # a lone stream pushes no one behind
    off = make_scheduler(realtime_admission=False)
    off.capacity.steps.set(1, 2 * TOKEN_S)
    assert burst(off, 3)[0] == 3


def test_warm_up_calibrates_the_step_costs_of_a_real_engine():
    import torch

    from engine.factory import build_engine

    threads = torch.get_num_threads()  # voxgate-tiny's engine sets this process's own
    engine = build_engine("voxgate-tiny", config=EngineConfig(engine_process=False))
    try:
        curve = engine.core.scheduler.capacity.steps
        assert curve.sizes[0] == 1 and all(curve.predict(s) > 0 for s in curve.sizes)
        # Each size doubles the last until one falls behind real time (or max_num_seqs).
        assert curve.sizes == [2**i for i in range(len(curve.sizes))]
        assert engine.stats().kv_blocks_used == 0 and engine.stats().running == 0
    finally:
        asyncio.run(engine.shutdown())
        torch.set_num_threads(threads)
