"""Scheduler behaviour with fake model outputs: no torch, a fake clock, integer bookkeeping."""

from __future__ import annotations

import dataclasses
import types

import pytest

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from tests.engine import sched_fakes
from tests.engine.sched_fakes import admit, fake_step, streaming

FACTS = ChunkingFacts(
    first_chunk_tokens=21, chunk_tokens=28, seconds_per_token=1 / 82, frame_tokens=7
)


def make_scheduler(policy: str = "slack", **overrides) -> Scheduler:
    return sched_fakes.make_scheduler(FACTS, policy, **overrides)


def test_request_about_to_underrun_is_served_before_one_with_seconds_buffered():
    now = 100.0
    sched = make_scheduler("slack", max_num_seqs=1)
    relaxed = streaming(sched, arrival=1.0, buffered_s=5.0, now=now)
    urgent = streaming(sched, arrival=2.0, buffered_s=0.05, now=now)
    assert sched.slack(urgent, now) < 0.1 < sched.slack(relaxed, now)
    plan = sched.schedule(now)
    assert [c.request for c in plan.chunks] == [urgent]

    # fcfs ignores the buffers and serves the earlier arrival: the baseline the policy beats.
    fcfs = make_scheduler("fcfs", max_num_seqs=1)
    relaxed = streaming(fcfs, arrival=1.0, buffered_s=5.0, now=now)
    streaming(fcfs, arrival=2.0, buffered_s=0.05, now=now)
    assert [c.request for c in fcfs.schedule(now).chunks] == [relaxed]


def test_detokenizer_serves_the_emptiest_buffer_first():
    now = 50.0
    sched = make_scheduler("slack", max_detok_batch=1)
    full = streaming(sched, arrival=1.0, buffered_s=4.0, now=now)
    dry = streaming(sched, arrival=2.0, buffered_s=0.02, now=now)
    for req in (full, dry):
        req.output_ids += [7] * FACTS.chunk_tokens  # a chunk ready for each
    assert sched.schedule_detok(now) == [dry]


def test_a_listener_about_to_run_dry_gets_the_frames_there_are():
    """Short of a full chunk, a request whose buffer would empty before the chunk filled is
    decoded at once (one frame); one with seconds buffered waits for the full, cheaper chunk."""
    now = 40.0
    sched = make_scheduler("slack")
    dry = streaming(sched, arrival=1.0, buffered_s=0.05, now=now)
    comfortable = streaming(sched, arrival=2.0, buffered_s=3.0, now=now)
    for req in (dry, comfortable):
        req.output_ids += [7] * FACTS.frame_tokens
    assert sched.schedule_detok(now) == [dry]
    dry.output_ids = dry.output_ids[:-1]  # less than a frame: nothing to decode yet
    assert sched.schedule_detok(now) == []


def test_the_frames_there_are_go_while_they_can_still_reach_the_listener():
    """The early frames go once waiting for the full chunk would leave the listener less than
    a codec job and the chunk's way to it (DELIVERY_ALLOWANCE_S), not only less than the job:
    its buffer is booked when the engine has the audio, before the gateway encodes and sends
    it."""
    from engine.scheduler import DELIVERY_ALLOWANCE_S

    now = 40.0
    sched = make_scheduler("slack")
    wait_s = (FACTS.chunk_tokens - FACTS.frame_tokens) * sched.step_time_s + sched.detok_time_s
    margin_s = sched.detok_time_s + DELIVERY_ALLOWANCE_S
    close = streaming(sched, arrival=1.0, buffered_s=wait_s + margin_s - 0.005, now=now)
    clear = streaming(sched, arrival=2.0, buffered_s=wait_s + margin_s + 0.005, now=now)
    for req in (close, clear):
        req.output_ids += [7] * FACTS.frame_tokens
    assert sched.detok_time_s < sched.slack(close, now) < margin_s < sched.slack(clear, now)
    assert sched.schedule_detok(now) == [close]


def test_a_comfortable_listener_waits_for_a_large_chunk_a_short_one_does_not():
    """With a large chunk (SNAC: 8 frames for one window's context), a listener with seconds
    buffered waits for it; one near the urgent buffer takes the ordinary chunk at once; and
    the large chunk goes out as soon as it is complete, whatever the buffer."""
    now = 30.0
    facts = dataclasses.replace(FACTS, large_chunk_tokens=2 * FACTS.chunk_tokens)
    sched = Scheduler(EngineConfig(), BlockManager(num_blocks=512, block_size=16), facts)
    sched.step_time_s, sched.detok_time_s = 0.012, 0.02
    comfortable = streaming(sched, arrival=1.0, buffered_s=3.0, now=now)
    short = streaming(sched, arrival=2.0, buffered_s=1.1, now=now)
    for req in (comfortable, short):
        req.output_ids += [7] * FACTS.chunk_tokens
    assert sched.schedule_detok(now) == [short]
    short.num_detokenized = len(short.output_ids)
    comfortable.output_ids += [7] * FACTS.chunk_tokens  # the large chunk is complete
    assert sched.schedule_detok(now) == [comfortable]


def test_new_arrival_gets_first_audio_before_steady_requests_with_slack():
    """Batch room for 2: two streaming requests with seconds of slack and one newcomer. Under
    slack the newcomer's prefill and decodes go first; its first chunk is out within
    first_chunk_tokens steps, and the steady ones never run dry meanwhile."""
    dt = 0.02
    now = 10.0
    sched = make_scheduler("slack", max_num_seqs=2)
    steady = [streaming(sched, arrival=1.0 + i, buffered_s=3.0, now=now) for i in range(2)]
    newcomer = admit(sched, prompt_len=30, arrival=now)
    steps = 0
    while newcomer.first_audio_time is None:
        plan_requests = {c.request.request_id for c in sched.schedule(now).chunks}
        assert newcomer.request_id in plan_requests
        fake_step(sched, now)
        now += dt
        steps += 1
        assert all(r.buffered_audio_s(now) > 0 for r in steady)
    assert steps == FACTS.first_chunk_tokens  # one prefill step, then one decode per token

    fcfs = make_scheduler("fcfs", max_num_seqs=2)
    now = 10.0
    for i in range(2):
        streaming(fcfs, arrival=1.0 + i, buffered_s=3.0, now=now)
    late = admit(fcfs, prompt_len=30, arrival=now)
    assert late.request_id not in {c.request.request_id for c in fcfs.schedule(now).chunks}


def test_prefills_of_several_arrivals_share_a_step_under_the_token_budget():
    sched = make_scheduler("slack", max_batch_tokens=100)
    a = admit(sched, prompt_len=40, arrival=1.0)
    b = admit(sched, prompt_len=40, arrival=2.0)
    c = admit(sched, prompt_len=40, arrival=3.0)
    plan = sched.schedule(5.0)
    assert [(ch.request, ch.num_tokens) for ch in plan.chunks] == [(a, 40), (b, 40), (c, 20)]
    assert not plan.chunks[2].samples  # c's prompt is only partly computed: no token yet


def test_prefill_never_takes_the_token_a_running_decode_needs():
    now = 20.0
    # Real-time admission off: its buffer guard would refuse the newcomer (the running
    # stream would run dry before its next chunk); this is about the prefill's budget.
    sched = make_scheduler("slack", max_batch_tokens=32, realtime_admission=False)
    running = streaming(sched, arrival=1.0, buffered_s=0.3, now=now)
    newcomer = admit(sched, prompt_len=200, arrival=now)
    plan = sched.schedule(now)
    sizes = {ch.request.request_id: ch.num_tokens for ch in plan.chunks}
    assert sizes == {newcomer.request_id: 31, running.request_id: 1}


def test_requests_far_ahead_of_their_listener_are_not_decoded():
    now = 30.0
    sched = make_scheduler("slack", max_lead_s=2.0)
    ahead = streaming(sched, arrival=1.0, buffered_s=10.0, now=now)
    behind = streaming(sched, arrival=2.0, buffered_s=1.0, now=now)
    assert [c.request for c in sched.schedule(now).chunks] == [behind]
    assert ahead.status == RequestStatus.RUNNING


def test_comfortable_streams_sit_out_while_another_listener_is_short():
    """Contention: a listener below urgent_buffer_s (or a request waiting for its first chunk)
    makes streams more than contended_lead_s ahead sit out; with no one short, they all run."""
    now = 30.0
    sched = make_scheduler("slack", contended_lead_s=2.0, urgent_buffer_s=1.0)
    ahead = streaming(sched, arrival=1.0, buffered_s=5.0, now=now)
    fine = streaming(sched, arrival=2.0, buffered_s=1.5, now=now)
    assert {c.request for c in sched.schedule(now).chunks} == {ahead, fine}  # no one short
    short = streaming(sched, arrival=3.0, buffered_s=0.4, now=now)
    out = sched.schedule(now)
    assert {c.request for c in out.chunks} == {fine, short}
    assert (out.held_by_lead, out.held_by_codec) == (1, 0)  # counted for the engine's profile
    short.audio_emitted_s += 1.0  # topped up: no one is short any more
    assert {c.request for c in sched.schedule(now).chunks} == {ahead, fine, short}
    newcomer = admit(sched, prompt_len=10, arrival=now)  # waiting for its first chunk
    assert {c.request for c in sched.schedule(now).chunks} == {fine, short, newcomer}


def test_requests_whose_codec_fell_behind_wait_for_it():
    """Backpressure: a request with max_undecoded_chunks chunks of tokens not yet handed to the
    codec sits out until the codec takes them; one with less keeps decoding."""
    now = 30.0
    sched = make_scheduler("slack", max_undecoded_chunks=2)
    backlog = streaming(sched, arrival=1.0, buffered_s=0.5, now=now)
    backlog.output_ids += [7] * (2 * FACTS.chunk_tokens)  # two chunks waiting for the codec
    backlog.num_computed += 2 * FACTS.chunk_tokens
    sched.blocks.ensure(backlog.request_id, backlog.num_tokens)
    fine = streaming(sched, arrival=2.0, buffered_s=1.0, now=now)
    fine.output_ids += [7] * (2 * FACTS.chunk_tokens - 1)
    fine.num_computed += 2 * FACTS.chunk_tokens - 1
    sched.blocks.ensure(fine.request_id, fine.num_tokens)
    out = sched.schedule(now)
    assert [c.request for c in out.chunks] == [fine]
    assert (out.held_by_lead, out.held_by_codec) == (0, 1)
    assert [r.request_id for r in sched.schedule_detok(now)] == [
        backlog.request_id,
        fine.request_id,
    ]
    backlog.num_detokenized = len(backlog.output_ids)  # the codec took them
    assert {c.request.request_id for c in sched.schedule(now).chunks} == {
        backlog.request_id,
        fine.request_id,
    }


def test_playback_reports_replace_the_wall_clock_estimate():
    req = Request([1, 2], SamplingParams(), arrival_time=0.0)
    req.first_audio_time = 1.0
    req.audio_emitted_s = 4.0
    assert abs(req.buffered_audio_s(3.0) - 2.0) < 1e-9  # 2 s played by wall clock
    req.played_s, req.played_report_time = 0.5, 3.0  # the client stalled: only 0.5 s played
    assert abs(req.buffered_audio_s(3.0) - 3.5) < 1e-9


def test_a_listener_at_another_speed_plays_the_audio_at_that_rate():
    """The gateway time-stretches a response at `speed` (SpeechRequest.playback_rate): 2 s of
    wall clock play 3 s of the request's audio at speed 1.5, and what is left lasts the
    listener 1/1.5 of its length; at 0.5, 1 s is played and the rest lasts twice as long."""
    fast = Request([1, 2], SamplingParams(), arrival_time=0.0, playback_rate=1.5)
    fast.first_audio_time, fast.audio_emitted_s = 1.0, 4.0
    assert abs(fast.buffered_audio_s(3.0) - 1.0 / 1.5) < 1e-9
    fast.played_s, fast.played_report_time = 2.0, 2.5  # a report, in the request's audio
    assert abs(fast.buffered_audio_s(3.0) - (4.0 - 2.0 - 0.75) / 1.5) < 1e-9
    slow = Request([1, 2], SamplingParams(), arrival_time=0.0, playback_rate=0.5)
    slow.first_audio_time, slow.audio_emitted_s = 1.0, 4.0
    assert abs(slow.buffered_audio_s(3.0) - 3.0 / 0.5) < 1e-9


def test_audio_the_gateway_holds_back_is_not_the_listeners_yet():
    """A chunk's last, partial output frame reaches the listener only with the next chunk
    (SpeechRequest.delivery_hold_s): the buffer and the first chunk's cover leave it out."""
    req = Request([1, 2], SamplingParams(), arrival_time=0.0, delivery_hold_s=0.02)
    req.first_audio_time, req.audio_emitted_s = 1.0, 4.0
    assert abs(req.buffered_audio_s(3.0) - 1.98) < 1e-9

    def first_chunk_tokens(hold_s: float) -> int:
        sched = make_scheduler("slack", first_audio_budget_s=10.0)
        sched.step_time_s, sched.detok_time_s = 0.005, 0.01
        req = Request(list(range(10)), SamplingParams(max_tokens=400), 0.0, delivery_hold_s=hold_s)
        assert sched.admit(req).ok
        return round(_run_until_first_audio(sched, req, now=0.0, dt=0.001) * 82)

    plain, held = first_chunk_tokens(0.0), first_chunk_tokens(0.06)
    assert held > plain  # 60 ms (five tokens) more before the first chunk covers the gap
    assert held - plain <= 7 * 2  # whole frames: at most the next frame or two


def test_a_held_requests_listener_plays_nothing_before_its_hold_ends():
    """A speculative reply is held from its listener (SpeechRequest.audible_after_s): audio
    out before the hold ends is all still ahead of them, and their clock starts then."""
    req = Request([1, 2], SamplingParams(), arrival_time=0.0, audible_after_s=0.5)
    req.first_audio_time, req.audio_emitted_s = 0.2, 0.3
    assert req.playing_since == 0.5
    assert abs(req.buffered_audio_s(0.4) - 0.3) < 1e-9  # held: nothing played yet
    assert abs(req.buffered_audio_s(0.6) - 0.2) < 1e-9  # 0.1 s played since the hold ended
    late = Request([1, 2], SamplingParams(), arrival_time=0.0, audible_after_s=0.5)
    late.first_audio_time, late.audio_emitted_s = 0.8, 0.3  # first audio after the hold
    assert late.playing_since == 0.8
    assert abs(late.buffered_audio_s(0.9) - 0.2) < 1e-9


def test_a_held_request_waits_for_first_audio_behind_those_due_before_it():
    """Among requests without audio, the one whose listener can hear it first goes first: a
    reply held until 0.3 s ranks behind one that arrived at 0.1 s, ahead of one at 0.4 s,
    and its first-audio budget counts from the end of its hold."""
    sched = make_scheduler("slack", max_num_seqs=1)
    held = Request(list(range(10)), SamplingParams(max_tokens=400), 0.0, audible_after_s=0.3)
    assert sched.admit(held).ok
    due_sooner = admit(sched, prompt_len=10, arrival=0.1)
    assert [c.request for c in sched.schedule(0.2).chunks] == [due_sooner]
    sched.remove(due_sooner.request_id)
    admit(sched, prompt_len=10, arrival=0.4)
    assert [c.request for c in sched.schedule(0.5).chunks] == [held]

    def first_audio_time(hold_s: float) -> float:
        sched = make_scheduler("slack", first_audio_budget_s=0.3)
        sched.step_time_s, sched.detok_time_s = 0.05, 0.1  # the cover takes seconds
        req = Request(list(range(10)), SamplingParams(max_tokens=400), 0.0, audible_after_s=hold_s)
        assert sched.admit(req).ok
        _run_until_first_audio(sched, req, now=0.0, dt=0.01)
        return req.first_audio_time

    assert abs(first_audio_time(0.0) - 0.2) < 0.011  # budget less the codec's time
    assert abs(first_audio_time(0.25) - 0.45) < 0.011  # the same, from the end of the hold


def test_kv_reservation_is_released_on_finish_and_on_removal():
    sched = make_scheduler("slack")
    free_before = sched.blocks.num_free
    a = admit(sched, prompt_len=20, arrival=1.0, max_tokens=30)
    b = admit(sched, prompt_len=20, arrival=2.0, max_tokens=30)
    fake_step(sched, 1.0)
    assert sched.blocks.num_free < free_before
    sched.remove(b.request_id)  # cancellation path
    for i in range(40):
        fake_step(sched, 1.0 + i * 0.01)
    assert a.request_id not in sched.requests
    assert sched.blocks.num_free == free_before and sched._reserved_blocks == 0


def _run_until_first_audio(sched: Scheduler, req: Request, now: float, dt: float) -> float:
    while req.first_audio_time is None:
        fake_step(sched, now)
        now += dt
    return req.audio_emitted_s


def test_first_chunk_covers_the_time_to_the_next_chunk():
    """Under load (slow steps) the first chunk grows past first_chunk_tokens, to whole frames
    that play at least as long as producing the next chunk takes, times the margin."""
    sched = make_scheduler("slack", first_audio_budget_s=10.0)
    sched.step_time_s, sched.detok_time_s = 0.01, 0.01
    req = admit(sched, prompt_len=10, arrival=0.0)
    first_s = _run_until_first_audio(sched, req, now=0.0, dt=0.001)
    cover = sched.first_audio_margin * (FACTS.chunk_tokens * 0.01 + 0.01)
    assert first_s >= cover
    assert first_s < cover + FACTS.frame_tokens * FACTS.seconds_per_token  # no more than needed
    assert round(first_s / FACTS.seconds_per_token) % FACTS.frame_tokens == 0

    fast = make_scheduler("slack", first_audio_budget_s=10.0)
    fast.step_time_s, fast.detok_time_s = 0.001, 0.001
    quick = admit(fast, prompt_len=10, arrival=0.0)
    assert round(_run_until_first_audio(fast, quick, 0.0, 0.001) * 82) == FACTS.first_chunk_tokens


def test_measured_gap_to_the_second_chunk_lengthens_later_first_chunks():
    """What the step and codec estimates leave out (a codec job already in flight, the async
    pipeline's lag) shows in how long second chunks really take: the first chunks of later
    requests cover that gap, and the estimate stays the floor when the gap is shorter."""
    sched = make_scheduler("slack", first_audio_budget_s=10.0)
    sched.step_time_s, sched.detok_time_s = 0.001, 0.001
    early = admit(sched, prompt_len=10, arrival=0.0)
    assert round(_run_until_first_audio(sched, early, 0.0, 0.001) * 82) == FACTS.first_chunk_tokens
    sched.audio_out(early, early.first_audio_time + 0.3, 0.3)  # its second chunk, 0.3 s later
    sched.audio_out(early, early.first_audio_time + 0.9, 0.3)  # later chunks do not count
    assert abs(sched.second_chunk_gap_s - 0.3) < 1e-9
    late = admit(sched, prompt_len=10, arrival=1.0)
    first_s = _run_until_first_audio(sched, late, 1.0, 0.001)
    assert first_s >= sched.first_audio_margin * 0.3
    assert first_s < sched.first_audio_margin * 0.3 + FACTS.frame_tokens / 82

    sched.second_chunk_gap_s = 0.0001  # shorter than the estimate: the estimate rules
    sched.step_time_s = 0.01
    estimate = FACTS.chunk_tokens * 0.01 + 0.001
    assert sched.first_chunk_cover_s() == sched.first_audio_margin * estimate


def test_cover_margin_defaults_to_the_codec_pipeline():
    """A threaded codec (CUDA: a job in flight, the async step of lag) gets margin 3, an
    inline one (CPU) 2; an explicit margin wins either way."""
    blocks = BlockManager(num_blocks=64, block_size=16)
    assert Scheduler(EngineConfig(), blocks, FACTS).first_audio_margin == 2.0
    assert Scheduler(EngineConfig(), blocks, FACTS, threaded_codec=True).first_audio_margin == 3.0
    explicit = EngineConfig(first_audio_margin=1.5)
    assert Scheduler(explicit, blocks, FACTS, threaded_codec=True).first_audio_margin == 1.5
    # A model's own measured margin (CosyVoice 2: 2) replaces the threaded default only.
    own = dataclasses.replace(FACTS, first_audio_margin=2.0)
    assert Scheduler(EngineConfig(), blocks, own, threaded_codec=True).first_audio_margin == 2.0
    assert Scheduler(EngineConfig(), blocks, own).first_audio_margin == 2.0
    assert Scheduler(explicit, blocks, own, threaded_codec=True).first_audio_margin == 1.5
    slow = dataclasses.replace(FACTS, first_audio_margin=4.0)
    assert Scheduler(EngineConfig(), blocks, slow).first_audio_margin == 2.0


def test_first_audio_budget_caps_the_wait_for_cover():
    """The budget is for the audio to be out: the chunk goes to the codec when the codec's own
    time is all that is left of it."""
    sched = make_scheduler("slack", first_audio_budget_s=0.3)
    sched.step_time_s = 0.05  # the cover would take seconds of audio
    sched.detok_time_s = 0.1
    req = admit(sched, prompt_len=10, arrival=0.0)
    first_s = _run_until_first_audio(sched, req, now=0.0, dt=0.01)
    assert abs(req.first_audio_time - 0.2) < 0.011
    assert first_s < sched.first_chunk_cover_s()


ORPHEUS = ChunkingFacts(21, 28, 1 / 82, 7, held_back_tokens=17)  # SNAC holds 17 tokens back


def budget_spent(facts: ChunkingFacts, tokens: int, now: float, **overrides) -> tuple:
    """A scheduler whose steps take 6.6 ms and codec jobs 10 ms (the next chunk's wait:
    28 x 6.6 + 10 = 195 ms), and a request whose first-audio budget is spent at `now`
    (the codec's 10 ms counted), holding `tokens` generated tokens."""
    sched = Scheduler(EngineConfig(**overrides), BlockManager(512, 16), facts, True)
    sched.step_time_s, sched.detok_time_s = 0.0066, 0.01
    arrival = now - sched.config.first_audio_budget_s + sched.detok_time_s - 1e-9
    req = admit(sched, prompt_len=10, arrival=arrival)
    give_tokens(req, tokens)
    return sched, req


def give_tokens(req: Request, tokens: int) -> None:
    req.output_ids = [7] * tokens
    req.num_computed = req.num_prompt_tokens + tokens
    req.status = RequestStatus.RUNNING


def test_past_the_budget_a_first_chunk_waits_for_the_frame_that_spares_a_gap():
    """At the budget, 4 frames (28 tokens, 11 audible: 134 ms) would be followed by a gap of
    ~60 ms before the next chunk (195 ms away); a fifth frame (7 steps, 46 ms) closes it, so
    the chunk waits for it and goes then. For at most one next-chunk wait past the budget."""
    now = 10.0
    sched, req = budget_spent(ORPHEUS, 28, now)
    assert sched.next_chunk_wait_s() == pytest.approx(0.1948)
    assert sched.schedule_detok(now) == []
    give_tokens(req, 34)  # not a whole frame more yet
    assert sched.schedule_detok(now + 0.04) == []
    give_tokens(req, 35)
    assert sched.schedule_detok(now + 0.046) == [req]
    give_tokens(req, 28)
    assert sched.schedule_detok(now + 0.19) == []
    assert sched.schedule_detok(now + 0.195) == [req]  # one next-chunk wait past: it goes
    # Before the budget nothing changed: the chunk waits for its cover (3 x 195 ms).
    early, _ = budget_spent(ORPHEUS, 35, now)
    assert early.schedule_detok(now - 0.01) == []


def test_past_the_budget_a_first_chunk_goes_when_waiting_cannot_spare_the_gap():
    """Tokens slower than real time (20 ms a step for 12 ms of audio), a frame that costs
    far more wait than the gap it spares (a 25-token hop against a 20-ms gap), or a stream
    that ends before it has the tokens: the chunk goes at the budget, as it always did."""
    now = 10.0
    slow, req = budget_spent(ORPHEUS, 28, now)
    slow.step_time_s = 0.02
    assert slow.schedule_detok(now) == [req]
    hop = ChunkingFacts(23, 25, 0.04, 25, held_back_tokens=4, lookahead_tokens=3)
    long_frames, req = budget_spent(hop, 23, now)
    long_frames.detok_time_s = 0.49  # the next chunk 655 ms away, the first plays 640 ms
    assert long_frames.schedule_detok(now + 0.48) == [req]
    short, req = budget_spent(ORPHEUS, 28, now)
    req.sampling = SamplingParams(max_tokens=30)
    assert short.schedule_detok(now) == [req]


# Step-Audio 2's pacing (models/step_audio2): 30 generated tokens a second, 25 of them codes;
# the token2wav's first chunk is 14 codes and its 3 look-ahead ones, HiFT holds 5 tokens back.
STEP_AUDIO2 = ChunkingFacts(20, 30, 1 / 30, 1, 5, 3, first_audio_margin=1.4)


def token2wav_first_audio_s(tokens, more=0):
    """Step-Audio 2's own count of a first job's audio (StepAudio2Model.first_chunk_audio_s),
    every token here a code and those to come 25 codes in 30: the token2wav decodes a first
    hop of 14 codes, then 25-code chunks, each once its 3 look-ahead codes exist; of 2 mel
    frames a code (20 ms each), HiFT keeps 8 back. So audio grows only at chunk edges."""
    codes = max(0, len(tokens) + more * 25 // 30 - 3)
    ready = 0 if codes < 14 else 14 + (codes - 14) // 25 * 25
    return max(0, 2 * ready - 8) * 0.02


def chunk_edge_budget_spent(tokens: int, now: float) -> tuple:
    """budget_spent for Step-Audio 2 with its own count of the first job's audio, the next
    chunk measured 450 ms after a first one: 17+ codes play 400 ms, a 50-ms gap."""
    sched, req = budget_spent(STEP_AUDIO2, tokens, now)
    sched.first_audio_s = token2wav_first_audio_s
    sched.second_chunk_gap_s = 0.45
    return sched, req


def test_past_the_budget_a_chunk_edge_codec_goes_when_its_next_chunk_is_far():
    """A codec that makes audio only at chunk edges: 20 tokens play 400 ms, 50 ms short of the
    next chunk, and the next 25-code chunk (27 steps, 178 ms) would cost more than twice that
    gap. Counted a token's audio (33 ms) a token, 2 steps would have seemed to close it, and
    the chunk would have waited a whole next-chunk wait past the budget for no audio."""
    now = 10.0
    sched, req = chunk_edge_budget_spent(20, now)
    assert sched.first_chunk_audio_s(req, 20) == pytest.approx(0.4)
    assert sched.schedule_detok(now) == [req]


def test_past_the_budget_a_chunk_edge_codec_waits_for_a_chunk_edge_that_is_near():
    """40 tokens play 400 ms too, but 2 more codes (3 steps) complete the next chunk and its
    look-ahead: 1.4 s, the cover. The chunk waits for them and goes then."""
    now = 10.0
    sched, req = chunk_edge_budget_spent(40, now)
    assert sched.schedule_detok(now) == []
    give_tokens(req, 42)
    assert sched.first_chunk_audio_s(req, 42) == pytest.approx(1.4)
    assert sched.schedule_detok(now + 0.02) == [req]


# GLM-4-Voice's pacing (models/glm_voice): replies of 13 text tokens, then 26 speech tokens of
# 80 ms each, 39 generated tokens for 2.08 s; the first chunk is 23 tokens.
GLM_VOICE = ChunkingFacts(23, 39, 2.08 / 39)


def glm_speech(tokens: int) -> int:
    """Speech tokens among a reply's first `tokens` (13 text, then 26 speech, repeated)."""
    whole, rest = divmod(tokens, 39)
    return whole * 26 + max(0, rest - 13)


def glm_first_audio_s(tokens, more=0):
    """GLM-4-Voice's own count (GlmVoiceModel.first_chunk_audio_s): none short of 10 speech
    tokens, then 80 ms each less the 42 frames (0.49 s) held back; tokens to come by the
    trained 13 : 26 blocks."""
    speech = glm_speech(len(tokens) + more)
    return 0.0 if speech < 10 else max(0.0, 0.08 * speech - 42 * 256 / 22050)


def test_past_the_budget_text_to_come_makes_no_audio():
    """A GLM-4-Voice reply's 39th token ends a speech block: the 13 tokens after it are text.
    A first chunk short of its next chunk by 30 ms then needs 14 more steps (92 ms), over
    twice the gap: it goes. Counted 53 ms a token, one step would have seemed to close it."""
    now = 10.0
    sched, req = budget_spent(GLM_VOICE, 39, now)
    sched.first_audio_s = glm_first_audio_s
    heard = sched.first_chunk_audio_s(req, 39)
    sched.second_chunk_gap_s = heard + 0.03
    assert sched.schedule_detok(now) == [req]
    # Where speech comes next (its 24th token) the same gap is a step away: it waits.
    sched, req = budget_spent(GLM_VOICE, 24, now)
    sched.first_audio_s = glm_first_audio_s
    sched.second_chunk_gap_s = sched.first_chunk_audio_s(req, 24) + 0.03
    assert sched.schedule_detok(now) == []


def test_first_chunk_cover_discounts_the_codecs_look_ahead():
    """A codec that holds back look-ahead frames (Orpheus' SNAC: 2 frames) plays less than the
    tokens it was handed: the first chunk waits for cover plus that look-ahead."""
    facts = ChunkingFacts(21, 28, 1 / 82, 7, held_back_tokens=14)
    sched = Scheduler(EngineConfig(first_audio_budget_s=10.0), BlockManager(512, 16), facts)
    sched.step_time_s, sched.detok_time_s = 0.005, 0.01
    req = admit(sched, prompt_len=10, arrival=0.0)
    tokens = round(_run_until_first_audio(sched, req, now=0.0, dt=0.001) * 82)
    cover_tokens = sched.first_chunk_cover_s() * 82
    assert tokens - 14 >= cover_tokens > tokens - 14 - 7


def test_first_chunk_audio_discounts_the_codecs_read_ahead():
    """CosyVoice 2: a first hop of 20 tokens is decoded once its 3 look-ahead tokens exist,
    HiFT holds 4 tokens back, and later audio comes in whole 25-token chunks."""
    cosy = ChunkingFacts(23, 25, 1 / 25, 25, held_back_tokens=4, lookahead_tokens=3)
    assert [cosy.first_chunk_audio_tokens(n) for n in (23, 47, 48, 73)] == [16, 16, 41, 66]
    # Without look-ahead the rule is the former one: whole frames less the held-back tokens.
    snac = ChunkingFacts(21, 28, 1 / 82, 7, held_back_tokens=14)
    assert all(snac.first_chunk_audio_tokens(n) == n - n % 7 - 14 for n in range(21, 90))
    sched = Scheduler(EngineConfig(first_audio_budget_s=10.0), BlockManager(512, 16), cosy)
    sched.detok_time_s = 0.1
    for step_s, released_at in ((0.004, 23), (0.01, 48)):  # 0.64 s covers 2 x 0.2 s, not 2 x 0.35 s
        sched.step_time_s = step_s
        req = admit(sched, prompt_len=10, arrival=0.0)
        req.output_ids = [7] * (released_at - 1)
        assert not sched._first_chunk_ready(req, now=0.0, codec_s=sched.detok_time_s)
        req.output_ids.append(7)
        assert sched._first_chunk_ready(req, now=0.0, codec_s=sched.detok_time_s)


def heard_playing(request: Request, now: float) -> None:
    """`request` has been decoding and its listener playing for 5 s, 2 s ahead."""
    request.num_computed = request.num_prompt_tokens + 1
    request.output_ids = [7]
    request.num_detokenized = 1
    request.status = RequestStatus.RUNNING
    request.first_audio_time = now - 5.0
    request.audio_emitted_s = 7.0


def test_realtime_admission_refuses_a_stream_once_steps_near_playback_time():
    """Every generating request gets a token a turn: once the turns measured at the size one
    more stream would make take more than a token's playback time, a newcomer is refused (and
    reserves nothing); finished streams make room."""
    sched = make_scheduler("slack", realtime_admission=True)
    token_s = FACTS.seconds_per_token
    for _ in range(3):
        sched.observe_step(1, 2 * token_s)  # overloaded, but nothing is running: admit
    first = admit(sched, prompt_len=20, arrival=0.0, max_tokens=30)
    heard_playing(first, now=0.1)  # settled: the slow start lets the next one in
    sched.admission.capacity.steps.clear_live()
    for _ in range(3):
        sched.observe_step(2, 0.85 * token_s)  # within the limit
    second = admit(sched, prompt_len=20, arrival=0.1, max_tokens=30)
    heard_playing(second, now=0.2)
    for _ in range(3):
        sched.observe_step(3, 1.05 * token_s)
    reserved = sched.reserved_blocks
    late = Request(list(range(20)), SamplingParams(max_tokens=30), 0.2)
    decision = sched.admit(late)
    assert not decision.ok and "real-time capacity" in decision.reason
    assert "3 streams would get a token every" in decision.reason
    assert sched.reserved_blocks == reserved and late.request_id not in sched.requests
    assert sched.admission.refusals == {"turn_cost": 1}
    for request in (first, second):
        sched.finish_generation(request, RequestStatus.FINISHED_LENGTH)
    assert sched.admit(late).ok  # nothing generates any more
    for request in (first, second, late):
        sched.remove(request.request_id)
    heard_playing(admit(sched, prompt_len=20, arrival=1.0), now=1.1)
    admit(sched, prompt_len=20, arrival=1.1)
    # Off (realtime_admission=False; on is every model's default): only the KV pool decides.
    off = make_scheduler("slack", realtime_admission=False)
    admit(off, prompt_len=20, arrival=0.0)
    for _ in range(3):
        off.observe_step(2, 10 * token_s)
    admit(off, prompt_len=20, arrival=0.1)


def test_a_request_of_streamed_text_waits_for_text_and_decodes_what_it_has():
    """Streamed text (models/text_feed.py): the request is not scheduled while its feed is
    empty, runs one token per id, and, out of text, has its frames decoded without waiting
    for a chunk to fill."""
    from models.text_feed import TextFeed

    sched = make_scheduler()
    req = admit(sched, prompt_len=10, arrival=0.0)
    req.text_feed = TextFeed(column=1, filler=0)
    assert req.awaits_text and sched.schedule(0.0).chunks == []
    ids = 2 * FACTS.frame_tokens
    req.text_feed.extend([5] * ids, final=False)
    now = 0.0
    for _ in range(2 * ids):
        for chunk in sched.schedule(now).chunks:
            chunk.request.num_computed = chunk.start + chunk.num_tokens
            if chunk.samples:  # the worker takes one id per sampled token
                req.text_feed.take()
                req.output_ids.append(7)
                req.status = RequestStatus.RUNNING
        now += 0.01
    assert len(req.output_ids) == ids < FACTS.first_chunk_tokens  # it stopped at its text
    assert req.awaits_text and sched.schedule(now).chunks == []
    assert sched.schedule_detok(now) == [req]  # a partial first chunk: no more frames come
    req.text_feed.extend([], final=True)
    assert not req.awaits_text and req.text_feed.drained
    assert [c.request for c in sched.schedule(now).chunks] == [req]
    assert req.text_feed.take() == 0  # the filler, after the final text


def test_a_step_reads_the_pages_of_its_rows_not_those_of_streams_sitting_it_out():
    """Real-time admission books a turn at the KV pages it read (EngineCore._observe_turn):
    under the contended lead cap a comfortable stream sits the step out and its pages are not
    read, though they stay in use."""
    now = 100.0
    sched = make_scheduler("slack")
    short = [streaming(sched, arrival=float(i), buffered_s=0.5, now=now) for i in range(2)]
    comfortable = streaming(sched, arrival=3.0, buffered_s=5.0, now=now)
    plan = sched.schedule(now)
    assert {c.request.request_id for c in plan.chunks} == {r.request_id for r in short}
    assert plan.pages_read == sum(len(r.block_table) for r in short) > 0
    assert sched.blocks.num_used == plan.pages_read + len(comfortable.block_table)


@pytest.mark.parametrize("policy", ["slack", "fcfs"])
def test_the_llm_and_the_codec_rank_streams_alike(policy):
    """One rank per policy (Scheduler._rank): the LLM's step and the codec's steady job order
    the same streams the same way."""
    now = 60.0
    sched = make_scheduler(policy)
    buffers = (1.5, 0.3, 1.2, 0.8, 1.9)
    streams = [
        streaming(sched, arrival=float(i), buffered_s=b, now=now) for i, b in enumerate(buffers)
    ]
    for req in streams:
        req.output_ids += [7] * FACTS.chunk_tokens  # a chunk ready for the codec
    llm = [c.request for c in sched.schedule(now).chunks]
    codec = sched.schedule_detok(now)
    assert llm == codec and len(llm) == len(streams)
    if policy == "fcfs":
        assert llm == streams  # arrival order
    else:
        assert [buffers[streams.index(r)] for r in llm] == sorted(buffers)  # emptiest first


def test_fcfs_too_holds_back_a_stream_past_the_lead_cap():
    """The lead cap is eligibility, not order: under fcfs a stream 50 s ahead of its listener
    (max_lead_s 30) sits out too, however early it came."""
    now = 200.0
    sched = make_scheduler("fcfs")
    ahead = streaming(sched, arrival=1.0, buffered_s=50.0, now=now)
    behind = streaming(sched, arrival=2.0, buffered_s=1.5, now=now)
    out = sched.schedule(now)
    assert [c.request for c in out.chunks] == [behind]
    assert out.held_by_lead == 1 and ahead not in [c.request for c in out.chunks]
    ahead.audio_emitted_s -= 25.0  # 25 s ahead: under the cap, it decodes again, first
    assert [c.request for c in sched.schedule(now).chunks] == [ahead, behind]


def test_fcfs_too_holds_back_a_stream_whose_chunks_wait_for_the_codec():
    """Codec backpressure is eligibility, not order: under fcfs a stream with
    max_undecoded_chunks chunks waiting for the codec sits out until the codec takes them."""
    now = 200.0
    sched = make_scheduler("fcfs")
    waiting = streaming(sched, arrival=1.0, buffered_s=1.5, now=now)
    other = streaming(sched, arrival=2.0, buffered_s=1.5, now=now)
    waiting.output_ids += [7] * (sched.config.max_undecoded_chunks * FACTS.chunk_tokens)
    waiting.num_computed = waiting.num_tokens - 1
    out = sched.schedule(now)
    assert [c.request for c in out.chunks] == [other]
    assert out.held_by_codec == 1
    waiting.num_detokenized = len(waiting.output_ids)  # the codec took them
    assert [c.request for c in sched.schedule(now).chunks] == [waiting, other]


def test_chunking_facts_are_read_from_a_models_facts_by_name():
    """ChunkingFacts.from_facts takes any object with ModelFacts' names (no model import); a
    model without large chunks (None) has none (0)."""
    model_facts = types.SimpleNamespace(
        first_chunk_tokens=23,
        chunk_tokens=25,
        seconds_per_token=0.04,
        frame_tokens=5,
        held_back_tokens=4,
        lookahead_tokens=3,
        first_audio_margin=2.0,
        steady_batch_rows=8,
        large_chunk_tokens=None,
    )
    facts = ChunkingFacts.from_facts(model_facts)
    expected = {**vars(model_facts), "large_chunk_tokens": 0}
    assert dataclasses.asdict(facts) == expected
