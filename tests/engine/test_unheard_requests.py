"""Requests no one plays as they are made (SpeechRequest.realtime False: a file returned whole, a
batch job): the scheduler runs them after every listener's stream, in the room those leave, and
hands their tokens to the codec in its cheapest chunks. No torch, a fake clock."""

from __future__ import annotations

import math

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.realtime_admission import UNHEARD_FLOOR_RATE
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from tests.engine import sched_fakes
from tests.engine.sched_fakes import admit, streaming

# Orpheus' shapes: 7 codes a frame, first chunks of 3 frames, chunks of 4, large chunks of 8.
FACTS = ChunkingFacts(
    first_chunk_tokens=21,
    chunk_tokens=28,
    seconds_per_token=1 / 82,
    frame_tokens=7,
    large_chunk_tokens=56,
)
TOKEN_S = FACTS.seconds_per_token


def make_scheduler(policy: str = "slack", **overrides) -> Scheduler:
    return sched_fakes.make_scheduler(FACTS, policy, num_blocks=2048, **overrides)


def decoding(sched: Scheduler, now: float) -> list[Request]:
    return [c.request for c in sched.schedule(now).chunks]


def test_unheard_requests_run_after_every_listener_and_only_while_none_is_short():
    now = 50.0
    sched = make_scheduler(max_num_seqs=3, urgent_buffer_s=1.0)
    batch = streaming(sched, arrival=now - 1.0, now=now, buffered_s=0.0, realtime=False)
    comfortable = streaming(sched, arrival=now - 3.0, now=now, buffered_s=1.5)
    later = streaming(sched, arrival=now - 2.0, now=now, buffered_s=1.2)
    # Seats for three: the listeners first (least slack first), the batch request last,
    # although its "buffer" is empty.
    assert decoding(sched, now) == [later, comfortable, batch]
    assert decoding(make_scheduler_with(sched, max_num_seqs=2), now) == [later, comfortable]
    # A listener short of audio: the batch request sits out (counted with the lead cap's):
    # its 100 tokens (1.2 s of audio) in a second are well ahead of its floor.
    later.audio_emitted_s -= 0.5
    out = sched.schedule(now)
    assert [c.request for c in out.chunks] == [later, comfortable]
    assert out.held_by_lead == 1
    # A newcomer waiting for its first audio is short too.
    later.audio_emitted_s += 0.5
    newcomer = admit(sched, arrival=now, realtime=True)
    assert batch not in decoding(sched, now) and newcomer in decoding(sched, now)


def test_an_unheard_request_behind_its_floor_runs_while_a_listener_is_short():
    """Some listener is always short under a steady stream of arrivals (a newcomer waits for
    its first chunk): a request without a listener that has made less audio than
    UNHEARD_FLOOR_RATE of the time since it came decodes anyway, after every listener, so a
    batch job finishes on a busy server. One still ahead of its floor keeps sitting out."""
    now = 50.0
    sched = make_scheduler(urgent_buffer_s=1.0)
    listener = streaming(sched, arrival=now - 2.0, now=now, buffered_s=1.5)
    # 100 tokens (1.22 s of audio) each: in 49 s behind the floor, in 4 s ahead of it.
    starved = streaming(sched, arrival=now - 49.0, now=now, buffered_s=0.0, realtime=False)
    fresh = streaming(sched, arrival=now - 4.0, now=now, buffered_s=0.0, realtime=False)
    assert 100 * TOKEN_S < 49.0 * UNHEARD_FLOOR_RATE and 100 * TOKEN_S > 4.0 * UNHEARD_FLOOR_RATE
    newcomer = admit(sched, arrival=now, realtime=True)  # short: no audio yet
    out = sched.schedule(now)
    assert [c.request for c in out.chunks] == [newcomer, listener, starved]
    assert out.held_by_lead == 1 and fresh not in [c.request for c in out.chunks]
    # Once it is ahead of its floor again, it sits out with the other.
    starved.output_ids += [7] * 1000
    assert starved not in decoding(sched, now)


def make_scheduler_with(sched: Scheduler, **overrides) -> Scheduler:
    """A scheduler of other settings over the same requests."""
    other = make_scheduler(**overrides)
    other.requests = sched.requests
    return other


def test_a_batch_of_unheard_requests_runs_whole_whatever_their_lead():
    """Without listeners no stream is short and none is ahead of anyone: every request
    decodes every step, however much audio it has made (no lead cap)."""
    now = 50.0
    sched = make_scheduler(max_lead_s=2.0, contended_lead_s=1.0)
    batch = [
        streaming(sched, arrival=float(i), now=now, buffered_s=30.0, realtime=False)
        for i in range(5)
    ]
    assert decoding(sched, now) == batch  # in arrival order
    fcfs = make_scheduler_with(sched, policy="fcfs")
    listener = streaming(sched, arrival=9.0, now=now, buffered_s=0.5)
    assert decoding(fcfs, now) == [listener, *batch]  # fcfs too puts listeners first


def test_unheard_requests_give_the_codec_large_chunks_and_their_end():
    now = 50.0
    sched = make_scheduler()
    batch = admit(sched, arrival=now, realtime=False)
    batch.status = RequestStatus.RUNNING
    listener = admit(sched, arrival=now, realtime=True)
    listener.status = RequestStatus.RUNNING
    # A listener's first chunk goes at its first-chunk size; the batch request's first job
    # waits for a large chunk, and every later one too.
    for request in (batch, listener):
        request.output_ids = [7] * FACTS.first_chunk_tokens
    sched.first_audio_margin = 0.0  # any first chunk covers the next one's wait
    assert sched.schedule_detok(now) == [listener]
    sched.remove(listener.request_id)
    batch.output_ids = [7] * (FACTS.large_chunk_tokens - 1)
    assert sched.schedule_detok(now + 5.0) == []  # however long it has waited
    batch.output_ids.append(7)
    assert sched.schedule_detok(now + 5.0) == [batch]
    batch.num_detokenized = len(batch.output_ids)
    sched.audio_out(batch, now + 5.0, 0.5)
    assert not batch.ttfa_critical and sched.slack(batch, now) == math.inf
    batch.output_ids += [7] * FACTS.chunk_tokens  # a full ordinary chunk: not yet
    assert sched.schedule_detok(now + 9.0) == []
    batch.output_ids += [7] * FACTS.chunk_tokens
    assert sched.schedule_detok(now + 9.0) == [batch]
    batch.num_detokenized = len(batch.output_ids)
    batch.output_ids += [7] * FACTS.frame_tokens
    sched.finish_generation(batch, RequestStatus.FINISHED_LENGTH)
    assert sched.schedule_detok(now + 9.0) == [batch]  # its end flushes what is left


def test_an_unheard_request_takes_no_lane_and_sets_no_listeners_gap():
    """The first-chunk lane is for listeners' first and urgent chunks; the gap measured after
    a first chunk is a listener's, which a batch request's large chunks would only lengthen."""
    now = 50.0
    sched = make_scheduler()
    batch = streaming(sched, arrival=1.0, now=now, buffered_s=0.0, realtime=False)
    batch.output_ids += [7] * FACTS.large_chunk_tokens
    plan = sched.schedule_detok_jobs(now, steady_free=True, lane_room=4, has_lane=True)
    assert plan.lane == [] and plan.steady == [batch]
    fresh = admit(sched, arrival=now, realtime=False)
    sched.audio_out(fresh, now, 0.5)
    sched.audio_out(fresh, now + 3.0, 0.5)
    assert sched.second_chunk_gap_s == 0.0


def test_real_time_admission_never_refuses_an_unheard_request():
    """Seeded so that one real-time stream is all the engine carries (a turn takes two token
    times at one row): a second listener is refused, a batch request is not, and a lone
    listener is admitted whatever the batch requests running (they yield to it)."""
    sched = make_scheduler()
    sched.admission.capacity.steps.seed(1, 2 * TOKEN_S)
    now = 100.0
    for i in range(3):
        streaming(sched, arrival=now + i, now=now + 5, buffered_s=2.0, realtime=False)
    first = Request([1] * 10, SamplingParams(max_tokens=50), now, realtime=True)
    assert sched.admit(first).ok
    second = Request([1] * 10, SamplingParams(max_tokens=50), now, realtime=True)
    verdict = sched.admit(second)
    assert not verdict.ok and "try again" in verdict.reason
    assert sched.admit(Request([1] * 10, SamplingParams(max_tokens=50), now, realtime=False)).ok
    assert sched.admission.stats(now).streams == 1


def test_real_time_admission_counts_unheard_requests_at_their_floor():
    """Where KV pages are priced, admission judges the listeners' outlook with each request
    without a listener at UNHEARD_FLOOR_RATE of a stream (a share of a row and of its pages
    a round: what it takes from the listeners while they are short). Turns of 4 ms + 0.165
    ms a row carry 8 listeners and a newcomer (5.3 ms); 180 long batch requests, a quarter
    of a row each, add 45 rows (~12.8 ms, past a token's ~12.2): the newcomer is refused
    beside them, and admitted once they are gone."""
    blocks = BlockManager(num_blocks=65536, block_size=16)  # room for the batch's pages
    sched = Scheduler(EngineConfig(max_num_seqs=256), blocks, FACTS)
    sched.admission.capacity.steps.seed(1, 0.00402)
    sched.admission.capacity.steps.seed(64, 0.0144)
    sched.admission.capacity.price_pages(1e-7)
    now = 100.0
    for i in range(8):
        streaming(sched, arrival=now - 2.0 + 0.01 * i, now=now, buffered_s=2.0)
    newcomer = Request([1] * 10, SamplingParams(max_tokens=400), now, realtime=True)
    assert sched.admission.verdict(now, newcomer).ok
    batch = [
        streaming(sched, now - 1.0, now, buffered_s=0.0, realtime=False, max_tokens=4000)
        for _ in range(180)
    ]
    verdict = sched.admission.verdict(now, newcomer)
    assert not verdict.ok and verdict.cause == "turn_cost"
    assert "with 9 streams (beside 180 requests without a listener)" in verdict.reason
    assert sched.admission.stats(now).streams == 8  # the stats count listeners
    for request in batch:
        sched.remove(request.request_id)
    assert sched.admission.verdict(now, newcomer).ok
