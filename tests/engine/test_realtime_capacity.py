"""Real-time admission from measured costs (engine/realtime_capacity.py, engine/turn_cost.py,
engine/listener_guard.py, the scheduler's admit): costs given as a warm-up or live turns would
report them, and a simulated engine (voxbench/realtime_sim.py) whose turns cost fixed + per_row x rows,
with listeners playing in real time. Those judges are torch-free; this module is not: the KV
page's price is measured with torch (engine/memory_bandwidth.py), and one test builds a real
voxgate-tiny engine to check its warm-up's calibration."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
import torch

from engine import memory_bandwidth
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.listener_guard import (
    STRAIN_MEMORY_S,
    ListenerGuard,
    ListenerHealth,
    health_of,
)
from engine.memory_bandwidth import copy_bandwidth, page_seconds
from engine.realtime_capacity import REALTIME_LOAD, CodecCost, RealtimeCapacity
from engine.realtime_outlook import OutlookInputs, StreamOutlook
from engine.refusal_causes import RefusalCause
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from engine.stream_columns import StreamColumns, gather
from engine.turn_cost import FLOOR_SAMPLES, LIVE_WINDOW, TurnCostModel, rising
from voxbench.realtime_sim import (
    RealtimeSim,
    SimCodec,
    TurnCost,
    poisson_arrivals,
    steady_arrivals,
)

TOKEN_S = 0.04  # voxgate-tiny's 25 tokens a second
FACTS = ChunkingFacts(first_chunk_tokens=4, chunk_tokens=8, seconds_per_token=TOKEN_S)


def make_scheduler(threaded_codec: bool = False, **overrides) -> Scheduler:
    config = EngineConfig(**overrides)
    return Scheduler(config, BlockManager(num_blocks=4096, block_size=16), FACTS, threaded_codec)


def burst(sched: Scheduler, count: int) -> tuple[int, str]:
    """`count` requests arriving one after another, each heard playing comfortably (settled,
    2 s ahead) before the next comes, so that the cost model alone judges them (a true burst
    meets the slow start as well: test_a_true_burst_…): how many were admitted, and the
    last refusal."""
    admitted, reason = 0, ""
    for i in range(count):
        now = 100.0 + 0.001 * i
        request = Request([1] * 8, SamplingParams(max_tokens=50), now)
        decision = sched.admit(request)
        if decision.ok:
            admitted += 1
            heard_playing(request, now, played_s=5.0, lead_s=2.0)
        else:
            reason = decision.reason
    return admitted, reason


def heard_playing(request: Request, now: float, played_s: float, lead_s: float) -> None:
    """`request` has been decoding, and its listener has played `played_s` and holds
    `lead_s` of audio."""
    request.num_computed = request.num_prompt_tokens + 1
    request.output_ids = [7]
    request.num_detokenized = 1
    request.status = RequestStatus.RUNNING
    request.first_audio_time = now - played_s
    request.audio_emitted_s = played_s + lead_s


def test_the_codec_cost_is_a_line_in_the_audio_its_jobs_made():
    """Jobs cost 20 ms + 100 ms a second of audio: the fit recovers it from jobs of several
    lengths, a stalled job (2 s) among its bin's others moves nothing, and the busy share
    never falls as streams are added."""
    cost = CodecCost()
    assert cost.fit() is None and cost.busy_share(4, 4, 0.32) is None
    for audio_s in (0.32, 0.64, 1.28, 2.56) * 3:
        cost.observe(audio_s, 0.020 + 0.100 * audio_s)
    cost.observe(1.28, 2.0)
    fit = cost.fit()
    assert fit.fixed_s == pytest.approx(0.020) and fit.per_unit_s == pytest.approx(0.100)
    shares = [cost.busy_share(n, 4, 0.32) for n in range(1, 40)]
    assert shares == sorted(shares)
    # 8 streams in jobs of 4 rows of 0.32 s: 6.25 jobs a second of 20 ms, and 0.8 s of
    # codec time for their 8 s of audio.
    assert shares[7] == pytest.approx(6.25 * 0.020 + 8 * 0.100)


def test_a_burst_is_cut_at_the_size_that_would_fall_behind():
    """Seeded at 1, 4 and 8 streams (0.3, 0.6 and 1.2 token times): the least-squares line is
    0.138 + 0.1297 x rows token times, which passes 0.95 at 6.26 streams; the seventh of a
    burst is refused before any step has run at that size (admitted, not yet prefilled
    requests count)."""
    sched = make_scheduler()
    for size, cost in ((1, 0.3 * TOKEN_S), (4, 0.6 * TOKEN_S), (8, 1.2 * TOKEN_S)):
        sched.admission.capacity.steps.seed(size, cost)
    admitted, reason = burst(sched, 24)
    assert admitted == 6
    assert "7 streams would get a token every" in reason and "try again" in reason


def test_streams_beyond_max_num_seqs_share_full_steps():
    sched = make_scheduler(max_num_seqs=4)
    sched.admission.capacity.steps.seed(4, 0.4 * TOKEN_S)
    # 9 streams: 9 / 4 full steps a token = 0.9 token times; a tenth makes it 1.0, past the
    # budget of 0.98.
    assert burst(sched, 20)[0] == 9


def test_live_steps_refine_the_calibration():
    """A calibration that was too hopeful (the gateway's own work shares the cores) is
    corrected by the decode turns that follow: fewer streams are admitted after them.
    Seeds 0.2 at 1 and 0.6 at 16 token times: the budget of 0.98 is reached at 30 streams.
    After 20 live turns of 1.1 at 16, each seed weighs 4 x (1 - 20/256) turns: the line runs
    from 0.2 at 1 to 1.022 at 16, which passes 0.98 at 15.2 streams, and the median 1.1
    measured at 16 floors every larger size."""
    sched = make_scheduler()
    sched.admission.capacity.steps.seed(1, 0.2 * TOKEN_S)
    sched.admission.capacity.steps.seed(16, 0.6 * TOKEN_S)
    assert burst(sched, 40)[0] == 30  # extrapolated along the seeds' slope
    live = make_scheduler()
    live.admission.capacity.steps.seed(1, 0.2 * TOKEN_S)
    live.admission.capacity.steps.seed(16, 0.6 * TOKEN_S)
    for _ in range(20):
        live.observe_step(16, 1.1 * TOKEN_S)
    assert burst(live, 40)[0] == 15


def test_a_codec_beside_the_llm_has_its_own_budget():
    """With a threaded codec, n streams need n seconds of audio a second, in jobs of up to
    max_detok_batch (4) rows of a chunk (8 tokens, 320 ms): at 20 ms a job + 100 ms a second
    of audio that is 0.1156 x n of real time, under 0.95 up to 8 streams."""
    sched = make_scheduler(threaded_codec=True, max_detok_batch=4)
    sched.admission.capacity.steps.seed(1, 0.1 * TOKEN_S)
    sched.admission.capacity.steps.seed(64, 0.2 * TOKEN_S)
    for _ in range(3):
        sched.observe_codec_job(0.020 + 0.100 * 1.28, audio_s=1.28)
        sched.observe_codec_job(0.020 + 0.100 * 0.32, audio_s=0.32)
    admitted, reason = burst(sched, 20)
    assert admitted == 8 and "the codec would be busy" in reason


def test_a_long_flush_or_a_stall_leaves_the_room_where_the_costs_put_it():
    """A one-row job that flushed a stream's 5-s tail and a job stalled for 2 s are what the
    codec did, not what a stream costs: the room (the metrics' gauge, found by bisection)
    stays at the 8 streams the line allows, and every smaller count fits."""
    capacity = RealtimeCapacity(TOKEN_S, 8, 128, 4, threaded_codec=True)
    capacity.steps.seed(1, 0.1 * TOKEN_S)
    capacity.steps.seed(64, 0.2 * TOKEN_S)
    for _ in range(3):
        capacity.codec.observe(1.28, 0.020 + 0.100 * 1.28)
        capacity.codec.observe(0.32, 0.020 + 0.100 * 0.32)
    capacity.codec.observe(5.0, 0.020 + 0.100 * 5.0)  # one row, its whole tail
    capacity.codec.observe(0.32, 2.0)  # a stall
    assert capacity.capacity() == 8
    assert all(capacity.room_for(n).ok for n in range(1, 9))
    assert not any(capacity.room_for(n).ok for n in range(9, 40))


def test_admission_is_on_by_default_and_off_only_when_asked():
    on = RealtimeCapacity(TOKEN_S, 8, 128, 64, threaded_codec=False)
    assert on.room_for(1000).ok  # an engine never measured: the KV pool decides
    sched = make_scheduler()
    sched.admission.capacity.steps.seed(1, 2 * TOKEN_S)
    assert burst(sched, 3)[0] == 1  # a lone stream pushes no one behind
    off = make_scheduler(realtime_admission=False)
    off.admission.capacity.steps.seed(1, 2 * TOKEN_S)
    assert burst(off, 3)[0] == 3


def test_warm_up_calibrates_the_step_costs_of_a_real_engine():
    import torch

    from engine.factory import build_engine
    from engine.outputs import Finished, SpeechRequest

    threads = torch.get_num_threads()  # voxgate-tiny's engine sets this process's own
    engine = build_engine("voxgate-tiny", config=EngineConfig(engine_process=False))
    try:
        curve = engine.core.scheduler.admission.capacity.steps
        sizes = sorted(curve.seeds)
        assert sizes[0] == 1 and all(curve.predict(s) > 0 for s in sizes)
        # Each size doubles the last until one falls behind real time (or max_num_seqs).
        assert sizes == [2**i for i in range(len(sizes))]
        assert curve.live_turns == 0  # the warm-up's own turns (compiles) are forgotten
        stats = engine.stats()
        assert stats.kv_blocks_used == 0 and stats.running == 0
        assert stats.admission.capacity_streams >= 1 and stats.admission.turn_per_row_s > 0

        async def serve_one() -> None:
            params = SamplingParams(max_tokens=30, min_tokens=30)
            stream = await engine.submit(SpeechRequest("Hi there.", sampling=params))
            assert isinstance([e async for e in stream][-1], Finished)

        asyncio.run(serve_one())
        # Its decode turns are the fit's live samples (booked at 1 row; the prefill's is none).
        assert 20 <= curve.live_turns <= 30
        assert curve.fit() is not None and engine.stats().admission.live_turns == curve.live_turns
    finally:
        asyncio.run(engine.shutdown())
        torch.set_num_threads(threads)


# --- the turn cost's fit (engine/turn_cost.py) ------------------------------------------------
def test_the_fit_recovers_a_turn_cost_from_live_turns_of_every_size():
    model = TurnCostModel()
    assert model.predict(4) is None  # nothing measured: cannot judge
    for i in range(LIVE_WINDOW):
        rows = 40 + i % 50
        model.observe(rows, 0.008 + 0.00005 * rows)
    fit = model.fit()
    assert fit.fixed_s == pytest.approx(0.008) and fit.per_unit_s == pytest.approx(0.00005)
    assert model.predict(128) == pytest.approx(0.008 + 0.00005 * 128)


def test_live_turns_replace_stale_burst_figures():
    """Warm-up bursts dearer than serving (their first chunks all hit the codec at once):
    once the window holds live turns of 45-90 rows, 128 rows is predicted along the live
    slope, not by the bursts; while it fills, the bursts weigh less and less (the blend
    may be off either way, within the margin's reach)."""
    true_cost = TurnCost(0.008, 0.00004)
    model = TurnCostModel()
    for rows in (1, 2, 4, 8, 16, 32, 64, 128):
        model.seed(rows, 1.5 * true_cost.seen(rows, 0))
    assert model.predict(128) > 1.4 * true_cost.seen(128, 0)
    for i in range(LIVE_WINDOW // 4):
        model.observe(45 + i % 46, true_cost.seen(45 + i % 46, 0))
    assert model.predict(128) == pytest.approx(true_cost.seen(128, 0), rel=0.1)
    for i in range(LIVE_WINDOW):
        model.observe(45 + i % 46, true_cost.seen(45 + i % 46, 0))
    assert model.predict(128) == pytest.approx(true_cost.seen(128, 0))


def test_live_turns_of_one_size_keep_the_bursts_slope():
    """Live turns all at 10 rows say nothing about the slope: the seeds keep a weight of one
    turn each, so the line passes near the live figure with the bursts' slope."""
    model = TurnCostModel()
    model.seed(1, 0.010)
    model.seed(32, 0.020)
    for _ in range(LIVE_WINDOW):
        model.observe(10, 0.015)
    fit = model.fit()
    assert fit.per_unit_s > 0.0001
    assert model.predict(10) == pytest.approx(0.015, rel=0.02)
    assert model.predict(20) > model.predict(10)


def test_on_a_cpu_live_turns_steeper_than_the_bursts_set_the_slope_beyond_their_sizes():
    """voxgate-tiny on a CPU core: bursts of 1-64 rows grew 0.5 ms a row, the live turns of a
    ramp's first seconds (1-7 rows, a fraction of the window) 2.5 ms, since each stream's audio
    is encoded by the gateway on the same core. The bursts' line would price 20 rows at 22 ms;
    the live slope stands beyond the live sizes, and a turn of 20 rows is priced at 58 ms."""
    model = TurnCostModel()
    for rows in (1, 2, 4, 8, 16, 32, 64):
        model.seed(rows, 0.011 + 0.0005 * rows)
    for i in range(LIVE_WINDOW // 4):
        rows = 1 + i % 7
        model.observe(rows, 0.008 + 0.0025 * rows)
    fit = model.fit()
    assert fit.per_unit_s == pytest.approx(0.0025, rel=0.01)
    assert model.predict(20) == pytest.approx(0.008 + 0.0025 * 20, rel=0.01)
    assert model.predict_rows(np.array([4, 20])) == pytest.approx(
        [0.008 + 0.0025 * 4, 0.008 + 0.0025 * 20], rel=0.01
    )
    # Live turns shallower than the bursts' line leave the fit to both (the seeds fade).
    shallow = TurnCostModel()
    for rows in (1, 2, 4, 8, 16, 32, 64):
        shallow.seed(rows, 0.011 + 0.0005 * rows)
    for i in range(LIVE_WINDOW // 4):
        shallow.observe(1 + i % 7, 0.011 + 0.0002 * (1 + i % 7))
    assert shallow.fit().per_unit_s > 0.0002


def test_on_a_gpu_a_live_slope_steeper_than_the_bursts_takes_theirs_through_the_live_turns():
    """Where pages are priced (a GPU) the bursts' slope bounds the live one everywhere: live
    turns of 107-178 rows fitting 0.0215 ms a row (an H200's ramp; the bursts' 0.008) give a
    line of the bursts' slope at the live turns' level, not the steep line up to 178 rows.
    Pages unpriced (a CPU), the live line stands, beyond the live sizes too."""
    steep = (0.0014, 0.0000215)

    def observed(model: TurnCostModel) -> TurnCostModel:
        for rows in (1, 8, 64, 256):
            model.seed(rows, 0.0028 + 0.000008 * rows)
        for i in range(LIVE_WINDOW):
            rows = 107 + i % 72
            model.observe(rows, steep[0] + steep[1] * rows)
        return model

    capacity = RealtimeCapacity(TOKEN_S, 8, 512, 64, threaded_codec=True)
    capacity.price_pages(0.25e-6)
    capacity.steps.slope_bound_by_bursts = True  # as the warm-up sets it on a GPU
    gpu = observed(capacity.steps)
    fit = gpu.fit()
    assert fit.per_unit_s == pytest.approx(0.000008)
    mean_rows = 107 + 35.5  # the live sizes' mean, each as many turns
    level = steep[0] + steep[1] * mean_rows
    assert fit.at(mean_rows) == pytest.approx(level, rel=0.01)
    assert gpu.predict(336) == pytest.approx(level + 0.000008 * (336 - mean_rows), rel=0.01)
    cpu = observed(TurnCostModel())
    assert cpu.fit().per_unit_s == pytest.approx(steep[1], rel=0.01)
    assert cpu.predict(150) == pytest.approx(steep[0] + steep[1] * 150, rel=0.01)
    cpu.slope_bound_by_bursts = True  # pages priced later: the cached fit does not stand
    assert cpu.fit() == fit
    cpu.slope_bound_by_bursts = False
    assert cpu.predict(336) == pytest.approx(steep[0] + steep[1] * 336, rel=0.01)


def test_a_larger_batch_is_never_predicted_cheaper_than_a_smaller_one():
    """Live turns with a falling trend: the slope is clamped at 0, and the sizes' medians,
    pooled where a smaller size's sits above a larger one's, floor every size above them:
    no larger batch is predicted cheaper than a smaller one. A slow turn moves no size's
    median; FLOOR_SAMPLES turns of a size are needed before it floors anything."""
    model = TurnCostModel()
    for _ in range(FLOOR_SAMPLES):
        model.observe(8, 0.030)
        model.observe(16, 0.020)
    assert model.fit().per_unit_s == 0.0
    assert model.predict(8) == pytest.approx(0.025)  # the two sizes pooled
    assert model.predict(16) == pytest.approx(0.025)
    assert model.predict(100) == pytest.approx(0.025)
    model.observe(8, 1.0)  # a garbage collection's turn: one more turn at its size's median
    assert model.predict(16) == pytest.approx((9 * 0.030 + 8 * 0.020) / 17)
    model.observe(2, 1.0)  # one slow turn of a new size: no floor yet
    assert model.predict(4) < 0.2


def test_one_dear_size_is_pooled_with_the_cheaper_larger_ones_not_raised_to_a_floor():
    """The turns of one crowded moment (arrivals' verdicts, a collection) make one size dear
    among cheaper ones around it: its median is pooled with the larger sizes' (weighted by
    their turns), not made the floor of every larger size, which priced an H100's ~250-row
    turns 1.0 ms dear from 8 turns at 155 rows (docs/benchmark-history.md, 2026-12-08). One
    turn short of FLOOR_SAMPLES, the dear size counts in the line alone."""
    model = TurnCostModel()
    for _ in range(40):
        model.observe(8, 0.030)
        model.observe(16, 0.030)
    for _ in range(FLOOR_SAMPLES - 1):
        model.observe(12, 0.040)
    assert model.predict(16) < 0.032
    model.observe(12, 0.040)
    pooled = (FLOOR_SAMPLES * 0.040 + 40 * 0.030) / (FLOOR_SAMPLES + 40)
    assert model.predict(12) == pytest.approx(pooled)
    assert model.predict(16) == pytest.approx(pooled)
    assert model.predict(200) == pytest.approx(pooled)


def test_a_step_up_that_larger_sizes_confirm_floors_them():
    """Where the larger sizes are as dear as the one before them, the step stands: every size
    above is priced at least at it, though a few cheap turns of a larger size (too few to
    floor anything) bend the line below it."""
    model = TurnCostModel()
    for _ in range(40):
        model.observe(8, 0.030)
    for _ in range(FLOOR_SAMPLES):
        for rows in (12, 14, 16):
            model.observe(rows, 0.040)
    for _ in range(3):
        model.observe(24, 0.030)
    assert model.fit().at(16) < 0.039
    assert model.predict(16) == pytest.approx(0.040)
    assert model.predict(20) >= 0.040


def bursts_model(seeds: dict[int, float]) -> TurnCostModel:
    """A GPU's model: the bursts `seeds` bound the slope and bend the turn; live turns of 20
    to 100 rows on a line of 3 ms + 0.005 ms a row."""
    model = TurnCostModel()
    model.slope_bound_by_bursts = True
    for rows, seconds in seeds.items():
        model.seed(rows, seconds)
    for rows in range(20, 101, 10):
        for _ in range(FLOOR_SAMPLES):
            model.observe(rows, 0.003 + 0.000005 * rows)
    return model


def test_past_the_live_sizes_the_turn_bends_where_the_bursts_bend():
    """Bursts that turn steep past 256 rows (a GPU's GEMMs past the roofline's ridge): up to
    the largest live size (100) the line; past it, the line plus what the bursts grew beyond
    their mean slope over the live sizes (20-100): nothing up to 256, then the bend; also
    once a few live turns pass the ridge, the line still the smaller batches'. Straight
    bursts bend nothing."""
    bent = {1: 0.0030, 64: 0.0033, 128: 0.0036, 256: 0.0042, 336: 0.0062}

    def burst(rows: float) -> float:  # the bursts joined by straight lines
        return float(np.interp(rows, list(bent), list(bent.values())))

    model = bursts_model(bent)
    line = model.fit()
    assert model.predict(100) == pytest.approx(line.at(100))
    assert model.predict(256) == pytest.approx(line.at(256))
    live_slope = (burst(100) - burst(20)) / 80
    bend = burst(336) - burst(100) - live_slope * 236
    assert bend > 0.0015
    assert model.predict(336) == pytest.approx(line.at(336) + bend)
    assert model.predict(400) > model.predict(336) + (0.0020 / 80) * 60  # along the last segment
    for _ in range(FLOOR_SAMPLES):  # live turns just past the ridge, at the line's cost
        model.observe(260, line.at(260))
    assert model.predict(336) > model.fit().at(336) + 0.0010
    straight = bursts_model({rows: 0.0030 + 0.0000047 * rows for rows in (1, 64, 128, 256, 336)})
    assert straight.predict(336) == pytest.approx(straight.fit().at(336))


@pytest.mark.parametrize("seed", range(20))
def test_rising_is_the_nearest_non_decreasing_sequence(seed):
    """Pooling adjacent violators gives a non-decreasing sequence that keeps the weighted
    total, and none of a sample of other non-decreasing sequences is nearer."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=12).cumsum() * rng.choice([-1, 1])
    weights = rng.integers(1, 20, size=12).astype(float)
    fit = rising(values, weights)
    assert np.all(np.diff(fit) >= -1e-12)
    assert float(weights @ fit) == pytest.approx(float(weights @ values))
    loss = float(weights @ (fit - values) ** 2)
    for _ in range(200):
        other = np.sort(fit + rng.normal(scale=0.3, size=12))
        assert float(weights @ (other - values) ** 2) >= loss - 1e-9
    assert rising(np.array([1.0, 3.0, 2.0]), np.ones(3)).tolist() == [1.0, 2.5, 2.5]


# --- the listeners' buffers (engine/listener_guard.py) ----------------------------------------
def playing(sched: Scheduler, now: float, played_s: float, lead_s: float) -> Request:
    """A request whose listener has played `played_s` and holds `lead_s` of audio."""
    request = Request([1] * 8, SamplingParams(max_tokens=500), now - played_s - 0.5)
    assert sched.admit(request).ok
    heard_playing(request, now, played_s, lead_s)
    return request


def test_listener_health_counts_settled_streams_short_of_audio():
    """Settled after a second of audio; short below the line given (the scheduler's: its
    first-chunk cover), tokens waiting for the codec counted as audio (the chunk sawtooth
    does not make a stream short)."""
    sched = make_scheduler(realtime_admission=False)
    now = 100.0
    fine = playing(sched, now, played_s=5.0, lead_s=0.8)
    short = playing(sched, now, played_s=5.0, lead_s=0.3)
    covered = playing(sched, now, played_s=5.0, lead_s=0.3)
    covered.output_ids = [7] * 9  # 8 tokens (320 ms) waiting for a chunk
    decoding = playing(sched, now, played_s=5.0, lead_s=0.3)
    decoding.detok_in_flight, decoding.detok_in_flight_tokens = True, 8  # its chunk, decoding
    playing(sched, now, played_s=0.5, lead_s=0.1)  # not settled yet
    health = health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S)
    counts = (health.settled, health.short, health.unsettled, health.playing)
    assert counts == (4, 1, 1, 5) and health.shortest == pytest.approx((0.3, 0.5))
    # A codec job slower than the delivered audio lasts: that listener runs dry first.
    assert (
        health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S, codec_s=0.2).short == 1
    )
    assert (
        health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S, codec_s=0.35).short == 2
    )
    short.first_chunk_s = 0.2  # let out early: it started lower, and has gained since
    assert health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S).short == 0
    short.first_chunk_s = 0.4
    assert health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S).short == 1
    sched.finish_generation(short, RequestStatus.FINISHED_LENGTH)  # no longer generating
    assert health_of(gather(sched.requests.values(), now), now, 0.5, TOKEN_S).short == 0
    assert fine.wants_tokens


def test_the_guard_refuses_while_listeners_run_short_and_then_one_at_a_time():
    guard = ListenerGuard()
    assert guard.refusal(ListenerHealth(settled=40, short=0, unsettled=5), 10.0) is None
    cause, why = guard.refusal(
        ListenerHealth(settled=40, short=3, unsettled=0, shortest=(0.12, 0.4)), 10.0
    )
    assert cause == "listeners" and "3 of the 40 streams playing are running short" in why
    assert "held 0.12 s of audio, under its 0.40-s line" in why
    # 1 of 40 is within the share, but under strain a newcomer waits for the last to settle
    cause, why = guard.refusal(
        ListenerHealth(settled=40, short=1, unsettled=1, shortest=(0.35, 0.4)), 11.0
    )
    assert cause == "listeners" and "not settled yet" in why and "held 0.35 s" in why
    assert guard.refusal(ListenerHealth(settled=40, short=1, unsettled=0), 11.0) is None
    # The strain is remembered for a while after the last short listener caught up, while
    # settled streams play (with none left, their buffers are no longer at stake).
    assert guard.refusal(ListenerHealth(settled=41, short=0, unsettled=1), 11.5) is not None
    assert guard.refusal(ListenerHealth(settled=0, short=0, unsettled=1), 11.5) is None
    later = 11.0 + STRAIN_MEMORY_S + 0.1
    assert guard.refusal(ListenerHealth(settled=41, short=0, unsettled=3), later) is None


def test_under_strain_a_newcomer_may_take_the_place_of_a_stream_that_ended():
    """Under strain newcomers go in one at a time as the engine grows; one that only takes
    the place of a stream that ended, with fewer streams than were heard playing at once
    lately, adds nothing the listeners have not carried (a steady load at tens of arrivals
    a second always has some stream unsettled, and one of hundreds dipping under the cover
    must not stop it)."""
    guard = ListenerGuard()
    assert guard.refusal(ListenerHealth(settled=170, unsettled=5, playing=175), 10.0) is None
    strained = ListenerHealth(settled=165, short=1, unsettled=5, playing=168)
    refusal = guard.refusal(strained, 10.5)  # 170 streams, where 175 played at once
    assert refusal is None
    grown = ListenerHealth(settled=165, short=1, unsettled=10, playing=170)
    cause, why = guard.refusal(grown, 10.6)  # 175: as many as were carried, under strain
    assert cause == "listeners" and "not settled yet" in why
    # Many short listeners are refused by their share whatever was carried.
    many = ListenerHealth(settled=160, short=12, unsettled=5, playing=165)
    assert guard.refusal(many, 10.7)[0] == "listeners"


def test_the_slow_start_trusts_a_prediction_halfway_until_its_streams_are_heard():
    """Streams may be as many as half the prediction, or twice the most heard playing at
    once lately, or 4 (fewer are the cost model's alone to judge)."""
    guard = ListenerGuard()

    def cause(now: float, unheard: int, playing: int, predicted: int | None) -> str | None:
        health = ListenerHealth(settled=0, unsettled=unheard + playing, playing=playing)
        carries = None if predicted is None else (lambda n: n <= predicted)
        refusal = guard.refusal(health, now, carries)
        return refusal and refusal[0]

    assert cause(0.0, 3, 0, 6) is None and cause(0.0, 4, 0, 6) == "slow_start"
    assert cause(0.0, 44, 0, 90) is None and cause(0.0, 45, 0, 90) == "slow_start"
    assert cause(0.0, 500, 0, None) is None  # nothing measured: the KV pool decides
    assert cause(0.5, 0, 45, 90) is None  # the first half heard: the rest may go in
    assert cause(0.6, 10, 45, 100) is None and cause(0.6, 45, 45, 100) == "slow_start"
    # A steady load that churns (responses ending, new ones beginning) has been heard.
    assert cause(5.0, 20, 10, 40) is None
    # After CARRIED_WINDOW_S, what is heard now counts, not what was.
    assert cause(20.0, 45, 0, 90) == "slow_start"


def test_the_scheduler_refuses_by_the_listeners_whatever_the_model_predicts():
    sched = make_scheduler()
    sched.admission.capacity.steps.seed(1, 0.01 * TOKEN_S)
    sched.admission.capacity.steps.seed(64, 0.02 * TOKEN_S)  # room for thousands, by the model
    now = 100.0
    for _ in range(10):
        playing(sched, now, played_s=5.0, lead_s=2.0)
    assert sched.admission.verdict(now).ok and sched.admission.verdict(now).cause == ""
    for _ in range(2):
        playing(sched, now, played_s=5.0, lead_s=0.1)
    verdict = sched.admission.verdict(now)
    assert not verdict.ok and verdict.cause == "listeners"
    assert "2 of the 12 streams playing are running short of audio" in verdict.reason
    # Asking (EngineStats.realtime_refusal, polled) counts nothing: only a refused request.
    assert sched.admission.verdict(now).cause == "listeners"
    assert sched.admission.stats(now).refusals == {}
    refused = Request([1] * 8, SamplingParams(max_tokens=50), now)
    assert not sched.admit(refused).ok
    stats = sched.admission.stats(now)
    assert stats.refusals == {"listeners": 1}
    assert (stats.streams, stats.settled_listeners, stats.short_listeners) == (12, 12, 2)
    assert stats.capacity_streams > 1000


def test_priced_pages_judge_the_streams_by_their_outlook_not_their_count():
    """Turns of 8 ms + 0.1 ms a row carry 300 streams by their count; with 6 µs a KV page,
    150 streams growing to 800 tokens would not (~51 pages each at their end: a turn of
    ~69 ms for 38 ms of audio), while 150 at 100 tokens ending in 50 more would."""
    capacity = RealtimeCapacity(TOKEN_S, 8, 256, 8, False, page_tokens=16, lead_cap_s=2.0)
    capacity.steps.seed(1, 0.0081)
    capacity.steps.seed(64, 0.0144)
    assert capacity.room_for(151).ok
    capacity.price_pages(6e-6)
    newcomer = StreamOutlook(16, 800, 0.0)
    verdict = capacity.room_with([StreamOutlook(16, 800, 0.5)] * 150, [newcomer])
    assert not verdict.ok and verdict.cause == "turn_cost"
    assert "short of audio" in verdict.reason and "KV page" in verdict.reason
    assert verdict.outlook is not None and verdict.outlook.shortfall() is not None
    ending = [StreamOutlook(100, 50, 0.5)] * 150
    assert capacity.room_with(ending, [StreamOutlook(16, 50, 0.0)]).ok
    room = capacity.capacity(ending, StreamOutlook(16, 50, 0.0))
    assert 151 <= room <= capacity.capacity()  # never more than the count allows
    assert capacity.capacity([StreamOutlook(16, 800, 0.5)] * 150, newcomer) == 150  # no room


def test_the_outlook_counts_a_chunk_the_codec_is_decoding_as_banked_audio():
    """A stream whose chunk is in a codec job holds that chunk's audio as surely as one whose
    tokens wait for a chunk: the outlook banks both (the guard's lead alike, above)."""
    sched = make_scheduler()
    now = 100.0
    waiting = playing(sched, now, played_s=5.0, lead_s=0.3)
    waiting.output_ids = [7] * 9  # 8 tokens waiting for a chunk
    decoding = playing(sched, now, played_s=5.0, lead_s=0.3)
    decoding.output_ids = [7] * 9
    decoding.num_detokenized = 9
    decoding.detok_in_flight, decoding.detok_in_flight_tokens = True, 8
    bare = playing(sched, now, played_s=5.0, lead_s=0.3)
    banked = [sched.admission.outlook(r, now).banked_s for r in (waiting, decoding, bare)]
    assert banked == pytest.approx([0.3 + 8 * TOKEN_S, 0.3 + 8 * TOKEN_S, 0.3])


def test_a_refusal_says_its_cause_and_what_the_outlook_read():
    """The scheduler's refusal carries its cause and, where the streams' outlook refused, the
    outlook's inputs (EngineCore writes both to the request trace); a refusal by the KV pool
    carries its own cause and no outlook."""
    sched = Scheduler(EngineConfig(), BlockManager(num_blocks=65536, block_size=16), FACTS)
    sched.admission.capacity.steps.seed(1, 0.0081)
    sched.admission.capacity.steps.seed(64, 0.0144)
    sched.admission.capacity.price_pages(6e-6)
    decision = None
    for i in range(200):
        now = 100.0 + 0.001 * i
        request = Request([1] * 16, SamplingParams(max_tokens=800), now)
        decision = sched.admit(request)
        if not decision.ok:
            break
        heard_playing(request, now, played_s=5.0, lead_s=0.5)
    assert not decision.ok and decision.cause == RefusalCause.TURN_COST
    short = decision.outlook.shortfall()
    assert short is not None and f"{short.behind_s:.2f} s short" in decision.reason
    assert decision.outlook.streams[-1].remaining_tokens == 800  # the newcomer, last
    # The outlook judged low points against the scheduler's frame floor: a frame's tokens and
    # a codec job, read as the judgement was made.
    assert decision.outlook.floor_s == pytest.approx(
        FACTS.frame_tokens * FACTS.seconds_per_token + sched.detok_time_s
    )
    assert decision.outlook.floor_s == sched.frame_floor_s() > 0
    record = json.loads(json.dumps(decision.outlook.to_record()))
    assert OutlookInputs.from_record(record).floor_s == decision.outlook.floor_s
    del record["floor_s"]  # a trace written before the floor: judged against none
    assert OutlookInputs.from_record(record).floor_s == 0.0
    full = make_scheduler(realtime_admission=False)
    kv = full.admit(Request([1] * 16, SamplingParams(max_tokens=4096 * 16), 0.0))
    assert not kv.ok and kv.cause == RefusalCause.KV and kv.outlook is None


def test_stats_reuse_admissions_view_only_where_pages_are_priced():
    """Stats (every 50 ms) reuse the verdict and figures for ADMISSION_VIEW_S where the
    outlooks are judged (pages priced: milliseconds at hundreds of streams); on the CPU, where
    the count decides, and for every admission, they are judged fresh."""
    from engine.realtime_admission import ADMISSION_VIEW_S

    for page_s in (0.0, 1e-6):
        sched = make_scheduler()
        sched.admission.capacity.steps.seed(1, 0.2 * TOKEN_S)
        sched.admission.capacity.steps.seed(16, 0.6 * TOKEN_S)
        sched.admission.capacity.price_pages(page_s)
        assert burst(sched, 3)[0] == 3
        refusal, first = sched.admission.view(100.0)
        assert refusal == "" and first.streams == 3 and first.capacity_streams > 3
        assert burst(sched, 2)[0] == 2  # two more live streams
        _, soon = sched.admission.view(100.0 + ADMISSION_VIEW_S / 2)
        _, later = sched.admission.view(100.0 + ADMISSION_VIEW_S)
        assert later.streams == 5
        assert soon.streams == (3 if page_s else 5)


def test_a_page_costs_its_bytes_at_the_gpus_bandwidth_and_nothing_on_the_cpu():
    cpu = torch.device("cpu")
    assert copy_bandwidth(cpu, nbytes=8 << 20) > 1e8  # any machine moves 100 MB/s
    assert page_seconds(cpu, 917_504) == 0.0


def test_a_gpu_prices_a_page_at_its_bytes_over_the_copys_bandwidth(monkeypatch):
    """No share of the bandwidth held back: served decode attention reaches a large copy's
    within a few per cent either way (BENCHMARKS.md), so a page costs its copy time."""
    import engine.memory_bandwidth as bandwidth

    monkeypatch.setattr(bandwidth, "copy_bandwidth", lambda device, nbytes: 4.28e12)
    assert page_seconds(torch.device("cuda"), 917_504) == pytest.approx(917_504 / 4.28e12)


def test_a_gpu_with_no_memory_left_to_measure_leaves_pages_unpriced(monkeypatch, caplog):
    """The probe's buffers come after the KV pool took its share: where even a smaller one
    does not fit, admission judges by the count of streams and the log says why."""
    tried = []

    def out_of_memory(device, nbytes):
        tried.append(nbytes)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(memory_bandwidth, "copy_bandwidth", out_of_memory)
    with caplog.at_level("WARNING", logger="voxgate.engine"):
        assert page_seconds(torch.device("cuda"), 917_504) == 0.0
    assert tried == [memory_bandwidth.COPY_BYTES, memory_bandwidth.COPY_BYTES // 4]
    assert "--kv-memory-fraction" in caplog.text


# --- a simulated engine ----------------------------------------------------------------------
# GPU-like: a large fixed cost per turn, a small one per row; CPU-like: the reverse. Prompt
# tokens cost a little (the newcomers' prefills). Warm-up bursts overstate large batches.
GPU_LIKE = TurnCost(fixed_s=0.020, per_row_s=0.0002, prompt_token_s=0.00002)
CPU_LIKE = TurnCost(fixed_s=0.002, per_row_s=0.001, prompt_token_s=0.0001)


def stale_bursts(cost: TurnCost, up_to: int) -> dict[int, float]:
    return {
        2**i: cost.seen(2**i, 0) * (1.3 if 2**i >= 8 else 1.0) for i in range(up_to.bit_length())
    }


@pytest.mark.parametrize("cost", [GPU_LIKE, CPU_LIKE], ids=["gpu-like", "cpu-like"])
def test_simulated_engine_admits_near_its_capacity_and_no_stream_falls_behind(cost):
    """Listeners arrive at 10 a second up to 1.5 x what the engine carries, each for 40 s
    of audio, and try again a second after a refusal. Admission lets in at least 85 % of
    the true capacity (stale warm-up figures cost some at first) and no listener runs dry."""
    capacity = cost.capacity(TOKEN_S)
    sim = RealtimeSim(cost, FACTS, stale_bursts(cost, capacity))
    result = sim.run(steady_arrivals(int(1.5 * capacity), 10), stream_tokens=1000, until_s=30)
    assert 0.85 * capacity <= result.peak_streams <= capacity, result
    assert not result.late_streams and result.worst_lead_s == 0.0
    assert sim.scheduler.admission.refusals.get("turn_cost", 0) > 0


def test_simulated_engine_falls_behind_without_admission():
    """The simulator's capacity is real: 10 % more streams than it and listeners run dry."""
    capacity = CPU_LIKE.capacity(TOKEN_S)
    for streams, late in ((capacity, False), (int(1.1 * capacity), True)):
        sim = RealtimeSim(CPU_LIKE, FACTS, realtime_admission=False)
        result = sim.run(steady_arrivals(streams, 10), stream_tokens=1000, until_s=30)
        assert result.peak_streams == streams
        assert bool(result.late_streams) == late


def test_simulated_engine_under_lead_caps_extrapolates_from_small_turns():
    """A light load first: streams run ahead and sit out (lead caps), so live turns carry a
    few rows only; then a crowd arrives. The live slope, not the stale bursts, decides."""
    capacity = GPU_LIKE.capacity(TOKEN_S)
    arrivals = steady_arrivals(int(0.3 * capacity), 10)
    arrivals += steady_arrivals(int(1.2 * capacity), 10, start_s=12.0)
    sim = RealtimeSim(GPU_LIKE, FACTS, stale_bursts(GPU_LIKE, capacity))
    result = sim.run(arrivals, stream_tokens=1200, until_s=32)
    assert 0.85 * capacity <= result.peak_streams <= capacity, result
    assert not result.late_streams
    # The turn at the capacity is priced as it costs, not as the stale bursts would have it.
    predicted = sim.scheduler.admission.capacity.steps.predict(capacity)
    assert predicted == pytest.approx(GPU_LIKE.seen(capacity, 0), rel=0.05)


def test_simulated_engine_with_work_the_turns_do_not_see_is_held_by_the_listeners():
    """A quarter of each stream's cost falls outside the engine's turns (the gateway's
    encoding on the same cores): the model alone would admit 20 % too many. The listeners'
    buffers stop admission near the true capacity before any listener runs dry."""
    cost = TurnCost(0.020, 0.00015, 0.00002, unseen_per_row_s=0.00005)
    capacity = cost.capacity(TOKEN_S)
    model_only = int((REALTIME_LOAD * TOKEN_S - cost.fixed_s) / cost.per_row_s)
    assert model_only > 1.15 * capacity
    seeds = {rows: cost.seen(rows, 0) for rows in (1, 4, 16)}
    sim = RealtimeSim(cost, FACTS, seeds)
    result = sim.run(steady_arrivals(int(1.5 * capacity), 5), stream_tokens=1000, until_s=40)
    assert sim.scheduler.admission.refusals.get("listeners", 0) > 0
    assert result.peak_streams <= 1.05 * capacity, result
    assert not result.late_streams


# Qwen3-TTS-like, on a GPU: 80-ms frames, chunks of 4 beside a codec thread whose steady jobs
# take 50 ms + 2 ms a row (a chunk in flight holds 0.32 s of a stream's audio), first chunks on
# a lane; the goodput benchmark's random arrivals of streams of 2-11 s.
FRAMES_FACTS = ChunkingFacts(
    first_chunk_tokens=2, chunk_tokens=4, seconds_per_token=0.08, first_audio_margin=2.0
)
FRAMES_TURN = TurnCost(fixed_s=0.020, per_row_s=0.0003, prompt_token_s=2e-5, noise_s=0.003)
FRAMES_CODEC = SimCodec(fixed_s=0.05, per_row_s=0.002, lane_rows=8, lane_fixed_s=0.02)


def frames_run(seed: int, monkeypatch=None, **config) -> tuple[RealtimeSim, object]:
    """25 arrivals a second for 60 s (seeded) through the Qwen3-TTS-like engine; with
    `monkeypatch`, admission reads a stream's audio without the chunk its codec job holds."""
    if monkeypatch is not None:
        monkeypatch.setattr(StreamColumns, "undecoded_tokens", property(lambda c: c.waiting_tokens))
    arrivals = poisson_arrivals(25, 60, seed)
    rng = random.Random(seed)
    lengths = [rng.randint(25, 140) for _ in arrivals]
    seeds = {rows: FRAMES_TURN.seen(rows, 0) for rows in (1, 8, 32, 64, 128)}
    sim = RealtimeSim(
        FRAMES_TURN, FRAMES_FACTS, seeds, priced_pages=False, codec=FRAMES_CODEC, **config
    )
    return sim, sim.run(arrivals, lengths, until_s=75, retry_s=None)


def test_a_chunk_the_codec_is_decoding_is_audio_the_listener_has(monkeypatch):
    """With a threaded codec, a stream's lead counts the chunk in its codec job: a load every
    stream of which plays on time is admitted whole. Read without it, streams whose chunk is
    being decoded look short of audio and the listener guard refuses servable streams."""
    sim, result = frames_run(seed=1)
    assert result.refusals == 0 and not result.late_streams
    sim, misread = frames_run(seed=1, monkeypatch=monkeypatch)
    assert sim.scheduler.admission.refusals.get(RefusalCause.LISTENERS, 0) > 0
    assert misread.admitted < result.admitted and not misread.late_streams


def test_beyond_what_the_codec_and_the_llm_carry_admission_refuses_and_none_is_late():
    """The same engine under a load it cannot carry whole (seed 0): without admission streams
    run dry; with it admission refuses a few (the listener guard, where a listener's delivered
    audio ran under a codec job's time, or the outlook), and every admitted listener plays on
    time."""
    _, unguarded = frames_run(seed=0, realtime_admission=False)
    assert len(unguarded.late_streams) > 50
    sim, guarded = frames_run(seed=0)
    assert 0 < guarded.refusals < 50 and not guarded.late_streams
    causes = sim.scheduler.admission.refusals
    assert sum(causes.values()) == guarded.refusals
    assert set(causes) <= {RefusalCause.TURN_COST, RefusalCause.LISTENERS}


def test_a_true_burst_goes_in_by_halves_of_the_prediction_and_none_falls_behind():
    """1.5 x capacity listeners at the same instant, warm-up figures exact, retrying every
    second. The prediction (0.95 of a token's time at 90 streams) is trusted halfway until
    the streams it let in are heard playing: 45 go in at once (admitted ones not yet
    prefilled count), the rest as those settle, up to 90; their prefills push no one
    behind."""
    capacity = GPU_LIKE.capacity(TOKEN_S)
    seeds = {2**i: GPU_LIKE.seen(2**i, 0) for i in range(7)}
    predicted = int((REALTIME_LOAD * TOKEN_S - GPU_LIKE.fixed_s) / GPU_LIKE.per_row_s + 1e-6)
    sim = RealtimeSim(GPU_LIKE, FACTS, seeds)
    first = sim.run([0.0] * int(1.5 * capacity), stream_tokens=400, until_s=0.5)
    assert first.admitted == predicted // 2
    assert sim.scheduler.admission.refusals == {"slow_start": first.refusals}
    sim = RealtimeSim(GPU_LIKE, FACTS, seeds)
    result = sim.run([0.0] * int(1.5 * capacity), stream_tokens=400, until_s=10)
    assert result.admitted == result.peak_streams == predicted
    assert not result.late_streams


# Page-bound, as a GPU at hundreds of streams: every KV page in use adds to a turn (a decode
# step reads them all), so a stream's turns grow with its context.
PAGE_BOUND = TurnCost(fixed_s=0.008, per_row_s=0.0001, prompt_token_s=0.00002, per_page_s=6e-6)


def test_a_page_bound_engine_is_judged_by_its_streams_outlook():
    """Listeners of 800 tokens (32 s) arriving at 10 a second: without admission 120 hold
    and 130 do not. With pages priced (engine/realtime_outlook.py) admission lets in about
    as many as hold, and none runs dry; judged by the count of streams alone, from turns
    measured while the contexts were short, it lets in more than hold, and listeners run
    dry at the end of their streams."""
    seeds = {rows: PAGE_BOUND.seen(rows, 0, 2 * rows) for rows in (1, 8, 64, 128)}

    def run(arrivals: int, **options) -> tuple[RealtimeSim, object]:
        sim = RealtimeSim(PAGE_BOUND, FACTS, seeds, **options)
        return sim, sim.run(steady_arrivals(arrivals, 10), stream_tokens=800, until_s=45)

    for streams, late in ((120, False), (130, True)):
        _, unguarded = run(streams, realtime_admission=False)
        assert unguarded.peak_streams == streams and bool(unguarded.late_streams) == late
    sim, priced = run(180)
    assert 0.85 * 120 <= priced.peak_streams <= 130, priced
    assert not priced.late_streams and priced.worst_lead_s == 0.0
    assert sim.scheduler.admission.refusals.get("turn_cost", 0) > 0
    fit = (
        sim.scheduler.admission.capacity.steps.fit()
    )  # the turns' part by rows, their pages taken out
    assert fit.per_unit_s == pytest.approx(PAGE_BOUND.per_row_s, rel=0.05)
    _, counted = run(180, priced_pages=False)
    assert counted.peak_streams > 120 and counted.late_streams


async def test_a_warm_up_the_kv_pool_cannot_hold_refuses_no_client():
    """The warm-up's own request, refused by a pool too small for it, is not counted: /metrics'
    refusals by cause are the clients' alone (a client's request is, once)."""
    from engine.api import EngineOverloaded
    from engine.factory import build_engine
    from engine.outputs import SpeechRequest

    engine = build_engine("tiny-orpheus", config=EngineConfig(num_kv_blocks=2))
    try:
        assert engine.stats().admission.refusals == {}
        too_long = SpeechRequest("Hello there.", sampling=SamplingParams(max_tokens=200))
        with pytest.raises(EngineOverloaded):
            await engine.submit(too_long)
        assert engine.stats().admission.refusals == {"kv": 1}
    finally:
        await engine.shutdown()


@pytest.mark.parametrize(
    "cost, max_num_seqs, stream_tokens",
    [(GPU_LIKE, 40, 1000), (PAGE_BOUND, 60, 800)],
    ids=["by-count", "by-outlook"],
)
def test_streams_beyond_max_num_seqs_take_turns_and_keep_up(cost, max_num_seqs, stream_tokens):
    """With a cap on rows a step below what the device carries, every turn runs the
    `max_num_seqs` most urgent streams and the others the next: a stream makes a token every
    n / max_num_seqs full turns on average, the audio it banked covering the turn it sits
    out. Admission lets in streams past the cap as far as full turns keep up, and no
    listener runs dry (without admission, the streams that full turns cannot carry do)."""
    seeds = {rows: cost.seen(rows, 0, 2 * rows) for rows in (1, 8, 32, max_num_seqs)}
    full_turn = cost.seen(max_num_seqs, 0)
    carried = int(REALTIME_LOAD * TOKEN_S * max_num_seqs / full_turn)
    assert carried > max_num_seqs
    sim = RealtimeSim(cost, FACTS, seeds, max_num_seqs=max_num_seqs)
    result = sim.run(steady_arrivals(2 * carried, 10), stream_tokens=stream_tokens, until_s=30)
    assert max_num_seqs < result.peak_streams <= carried, result
    assert not result.late_streams and result.worst_lead_s == 0.0
    beyond = RealtimeSim(cost, FACTS, seeds, max_num_seqs=max_num_seqs, realtime_admission=False)
    crowd = beyond.run(
        steady_arrivals(int(1.3 * carried), 10), stream_tokens=stream_tokens, until_s=30
    )
    assert crowd.late_streams


def test_the_simulator_books_admissions_turns_as_the_engine_does():
    """Admission's turn samples are the time between step starts, an arrival's loop time in
    the turn it fell in (EngineCore._observe_turn): with 10 ms an arrival, the turns that
    had one are booked that much dearer than the device's turn, the others at its cost."""
    cost = TurnCost(fixed_s=0.020, per_row_s=0.0, per_arrival_s=0.010)
    seeds = {rows: cost.seen(rows, 0) for rows in (1, 4, 16)}
    sim = RealtimeSim(cost, FACTS, seeds)
    sim.run(steady_arrivals(12, 3), stream_tokens=200, until_s=6)
    _, turns = sim.scheduler.admission.capacity.steps._live.snapshot()
    seconds = np.array([t[1] for t in turns])
    assert len(seconds) > 50
    assert np.all(seconds >= 0.020 - 1e-9)
    assert np.any(np.isclose(seconds, 0.030)) and np.any(np.isclose(seconds, 0.020))
