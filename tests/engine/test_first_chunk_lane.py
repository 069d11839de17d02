"""The scheduler's side of the first-chunk detokenizer lane (Scheduler.schedule_detok_jobs): first
chunks and chunks about to be late go there; no torch, a fake clock, fake jobs that finish in
any order."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

import pytest

from engine.request import Request, RequestStatus
from engine.scheduler import ChunkingFacts, Scheduler
from tests.engine import sched_fakes
from tests.engine.sched_fakes import apply_llm_step

FACTS = ChunkingFacts(
    first_chunk_tokens=23,
    chunk_tokens=25,
    seconds_per_token=0.04,
    frame_tokens=25,
    held_back_tokens=4,
    lookahead_tokens=3,
)  # CosyVoice 2's shape: first hop 20 + 3 look-ahead, 25-token chunks


def make_scheduler(**overrides) -> Scheduler:
    # No cover margin: a first chunk is ready at first_chunk_tokens (the release rule has its
    # own tests in test_scheduler.py). Real-time admission off: the fake engine's thin
    # buffers (barely faster than real time) would rightly turn later arrivals away, and
    # these tests are about the codec's jobs, not admission.
    rows = overrides.pop("steady_batch_rows", FACTS.steady_batch_rows)  # the model's fact
    facts = dataclasses.replace(FACTS, steady_batch_rows=rows)
    settings = {"first_audio_margin": 0.0, "realtime_admission": False, **overrides}
    return sched_fakes.make_scheduler(facts, num_blocks=1024, **settings)


def admit(sched: Scheduler, arrival: float, max_tokens: int = 400) -> Request:
    return sched_fakes.admit(sched, arrival, prompt_len=8, max_tokens=max_tokens)


def generate(sched: Scheduler, req: Request, n: int) -> None:
    """n more resolved tokens for `req`, as if decoded."""
    req.output_ids += [7] * n
    req.num_computed = req.num_prompt_tokens + len(req.output_ids)
    req.status = RequestStatus.RUNNING


def streaming(sched: Scheduler, now: float) -> Request:
    """A request past its first audio with a whole chunk of tokens waiting for the codec and
    a comfortable 1 s of audio at its listener."""
    req = admit(sched, arrival=now - 5.0)
    generate(sched, req, 100)
    req.num_detokenized = 75
    req.first_audio_time = now - 4.0
    req.audio_emitted_s = 5.0
    return req


def test_a_first_chunk_goes_to_the_lane_while_a_steady_job_is_in_flight():
    now = 10.0
    sched = make_scheduler()
    busy = streaming(sched, now)
    busy.detok_in_flight = True  # its chunk is in the steady job
    waiting = streaming(sched, now)  # a steady chunk ready too
    new = admit(sched, arrival=now - 0.2)
    generate(sched, new, FACTS.first_chunk_tokens)
    plan = sched.schedule_detok_jobs(now, steady_free=False, lane_room=8)
    assert plan.lane == [new] and plan.steady == []
    # Without a lane (or with its job in flight) the first chunk waits for the steady job, and
    # then rides it first, as before: schedule_detok is the steady job's pick.
    assert sched.schedule_detok_jobs(now, steady_free=False, lane_room=0).lane == []
    assert sched.schedule_detok_jobs(now, steady_free=True).steady == [new, waiting]
    assert sched.schedule_detok(now) == [new, waiting]


def test_a_lane_bound_first_chunk_spends_the_budget_the_faster_lane_leaves_on_its_cover():
    """The first-audio budget counts the codec's own time: a steady job's for the steady path,
    the lane's (measured, shorter) for the lane, so a lane-bound first chunk keeps building
    its cover for the difference instead of leaving early with a shorter one."""
    now = 10.0
    sched = make_scheduler()
    sched.first_audio_margin = 3.0  # a cover the first chunk has not reached
    sched.detok_time_s, sched.lane_time_s = 0.16, 0.04
    budget = sched.config.first_audio_budget_s
    new = admit(sched, arrival=now - (budget - 0.1))  # 0.1 s of budget left
    generate(sched, new, FACTS.first_chunk_tokens)
    assert sched.schedule_detok_jobs(now, steady_free=True, lane_room=0).steady == [new]
    assert sched.schedule_detok_jobs(now, steady_free=False, lane_room=8).lane == []
    later = now + 0.07  # 0.03 s left: the lane's job still fits, barely
    assert sched.schedule_detok_jobs(later, steady_free=False, lane_room=8).lane == [new]
    sched.lane_time_s = None  # no lane job measured yet: the steady estimate stands in
    assert sched.schedule_detok_jobs(now, steady_free=False, lane_room=8).lane == [new]


def test_with_both_free_first_chunks_take_the_lane_and_the_steady_job_the_rest():
    now = 10.0
    sched = make_scheduler()
    steady = streaming(sched, now)
    firsts = [admit(sched, arrival=now - 0.3 + 0.01 * i) for i in range(3)]
    for req in firsts:
        generate(sched, req, FACTS.first_chunk_tokens)
    plan = sched.schedule_detok_jobs(now, steady_free=True, lane_room=2)
    # The lane's room goes to the earliest arrivals; the first chunk it has no room for falls
    # back to the steady job, ahead of the steady chunk.
    assert plan.lane == firsts[:2]
    assert plan.steady == [firsts[2], steady]


def test_first_chunks_wait_for_a_busy_lane_when_steady_jobs_are_slower():
    """With a lane whose job (in flight, then its own) beats a steady job, a first chunk
    skips the steady job and waits for the lane; when steady jobs are as quick, it rides the
    steady job as before. Other chunks ride the steady job either way."""
    now = 10.0
    sched = make_scheduler()
    playing = streaming(sched, now)
    new = admit(sched, arrival=now - 0.3)
    generate(sched, new, FACTS.first_chunk_tokens)
    sched.detok_time_s, sched.lane_time_s = 0.2, 0.05  # steady 200 ms, lane 50 ms
    assert sched.first_chunk_waits_for_lane(sched.lane_time_s)
    busy = sched.schedule_detok_jobs(now, steady_free=True, lane_room=0, has_lane=True)
    assert busy.steady == [playing] and busy.lane == []
    # More first chunks than the free lane has room for: the rest wait for the next lane job.
    other = admit(sched, arrival=now - 0.29)
    generate(sched, other, FACTS.first_chunk_tokens)
    plan = sched.schedule_detok_jobs(now, steady_free=True, lane_room=1, has_lane=True)
    assert plan.lane == [new] and plan.steady == [playing]
    # Steady jobs within twice the lane's time: first chunks ride them again.
    sched.detok_time_s = 0.09
    assert not sched.first_chunk_waits_for_lane(sched.lane_time_s)
    quick = sched.schedule_detok_jobs(now, steady_free=True, lane_room=0, has_lane=True)
    assert quick.steady == [new, other, playing]
    # No lane at all: the steady job is the only way out, however slow.
    sched.detok_time_s = 0.2
    alone = sched.schedule_detok_jobs(now, steady_free=True, lane_room=0, has_lane=False)
    assert alone.steady == [new, other, playing]


def test_a_playing_request_about_to_run_dry_takes_the_lane_after_first_chunks():
    """A chunk whose listener would not last through a steady job in flight and its own (x the
    margin) goes out on the lane; one with a comfortable buffer waits for the steady job."""
    now = 10.0
    sched = make_scheduler()
    sched.first_audio_margin = 1.5
    sched.detok_time_s = 0.15  # urgent below 2 x 0.15 x 1.5 = 0.45 s of buffered audio
    sched.lane_time_s = 0.1
    comfortable = streaming(sched, now)  # 1.0 s buffered
    short = streaming(sched, now)
    short.audio_emitted_s = 4.3  # 0.3 s buffered
    shorter = streaming(sched, now)
    shorter.audio_emitted_s = 4.1  # 0.1 s buffered
    new = admit(sched, arrival=now - 0.3)  # its first-audio budget is spent: it goes now
    generate(sched, new, FACTS.first_chunk_tokens)
    assert sched.lane_urgent(short, now) and not sched.lane_urgent(comfortable, now)
    plan = sched.schedule_detok_jobs(now, steady_free=False, lane_room=8)
    assert plan.lane == [new, shorter, short]  # first chunks first, then the least slack
    plan = sched.schedule_detok_jobs(now, steady_free=True, lane_room=2)
    assert plan.lane == [new, shorter]
    assert plan.steady == [short, comfortable]
    # With steady jobs this short nothing is urgent.
    sched.detok_time_s = 0.01
    assert sched.schedule_detok_jobs(now, steady_free=False, lane_room=8).lane == [new]


def test_a_request_decoded_once_but_still_silent_stays_off_the_lane():
    now = 10.0
    sched = make_scheduler()
    # Decoded once already (its first job made no audio, say): not a lane request any more,
    # though it still waits for first audio. Its next chunk must follow the first in order.
    req = admit(sched, arrival=now - 1.0)
    generate(sched, req, 2 * FACTS.first_chunk_tokens)
    req.num_detokenized = 1
    assert req.ttfa_critical
    assert sched.schedule_detok_jobs(now, steady_free=False, lane_room=8).lane == []
    assert sched.schedule_detok_jobs(now, steady_free=True, lane_room=8).steady == [req]


def test_a_steady_job_waits_for_rows_while_no_listener_needs_audio_soon():
    """With steady_batch_rows and a lane, ready chunks of comfortable listeners wait for more
    rows; a full batch, a listener near the due line, or a first chunk riding the steady job
    sends them all at once. Without a lane they never wait."""
    now = 10.0
    sched = make_scheduler(steady_batch_rows=3, first_audio_margin=2.0)
    sched.detok_time_s, sched.lane_time_s = 0.1, 0.09  # due under 4 x 0.1 x 2 = 0.8 s
    a, b = streaming(sched, now), streaming(sched, now)  # 1.0 s buffered each
    # Two live streams cannot fill a batch of 3: nothing waits (light load).
    light = sched.schedule_detok_jobs(now, steady_free=True, lane_room=8, has_lane=True)
    assert light.steady == [a, b]
    midway = streaming(sched, now)  # a third stream, generating, its next chunk not ready
    midway.num_detokenized = 90
    held = sched.schedule_detok_jobs(now, steady_free=True, lane_room=8, has_lane=True)
    assert held.steady == [] and held.lane == []
    assert sched.schedule_detok_jobs(now, steady_free=True).steady == [a, b]  # no lane
    sched.remove(midway.request_id)
    c = streaming(sched, now)  # the third row: the batch is full
    full = sched.schedule_detok_jobs(now, steady_free=True, lane_room=8, has_lane=True)
    assert full.steady == [a, b, c]
    sched.remove(c.request_id)
    midway = streaming(sched, now)
    midway.num_detokenized = 90
    b.audio_emitted_s = 4.7  # 0.7 s buffered: due (not yet lane-urgent, under 0.4 s)
    due = sched.schedule_detok_jobs(now, steady_free=True, lane_room=8, has_lane=True)
    assert due.lane == [] and due.steady == [b, a]
    b.audio_emitted_s = 5.0
    # A first chunk rides the steady job when the lane is no quicker: it goes, with the rest.
    new = admit(sched, arrival=now - 0.3)
    generate(sched, new, FACTS.first_chunk_tokens)
    ride = sched.schedule_detok_jobs(now, steady_free=True, lane_room=0, has_lane=True)
    assert ride.steady == [new, a, b]


def run_fake_engine(
    seed: int, lane_room: int, steps: int = 500, step_s: float = 0.01, steady_batch_rows: int = 0
):
    """Requests arrive, gain a token a step (of `step_s`; a token is 0.04 s of audio), and
    their ready chunks go out as jobs that take a random number of steps (lane jobs short,
    steady ones long), so jobs finish in every order.
    Each job's rows are checked against the jobs in flight. Returns the scheduler, requests,
    each request's decoded token ranges in the order their jobs came back, and the jobs."""
    rng = random.Random(seed)
    sched = make_scheduler(
        max_detok_batch=4, first_audio_margin=1.5, steady_batch_rows=steady_batch_rows
    )
    sched.detok_time_s = 0.1  # the steady job's estimate, which lane_urgent compares with
    sched.lane_time_s = 0.03  # lane jobs are quicker: first chunks wait for the lane
    requests: list[Request] = []
    in_flight: list[tuple[int, bool, list]] = []  # (step it finishes, lane, rows)
    returned: dict[str, list[tuple[int, int]]] = defaultdict(list)
    jobs: list[tuple[int, int, bool, bool]] = []  # (submitted at, finished at, lane, urgent)
    for step in range(steps):
        now = step * step_s
        if step % 12 == 0 and step < steps // 2:
            requests.append(admit(sched, now, max_tokens=rng.randint(30, 110)))
        apply_llm_step(sched, now)
        for job in [j for j in in_flight if j[0] <= step]:
            in_flight.remove(job)
            for req, start, end, final in job[2]:
                req.detok_in_flight = False
                returned[req.request_id].append((start, end))
                if end > start:
                    sched.audio_out(req, now, (end - start) * FACTS.seconds_per_token)
                if final:
                    req.detok_done = True
                    sched.remove(req.request_id)
        steady_free = not any(not lane for _, lane, _ in in_flight)
        lane_free = not any(lane for _, lane, _ in in_flight)
        plan = sched.schedule_detok_jobs(
            now, steady_free, lane_room if lane_free else 0, has_lane=lane_room > 0
        )
        for lane, picked in ((True, plan.lane), (False, plan.steady)):
            if not picked:
                continue
            assert len(picked) <= (lane_room if lane else 4)
            rows, urgent = [], False
            for req in picked:
                assert not req.detok_in_flight, "a request was put in two jobs at once"
                # With a lane this much quicker, no first chunk rides a steady job.
                assert lane or not lane_room or req.num_detokenized > 0
                if lane and req.num_detokenized > 0:  # only a chunk about to be late
                    assert not req.ttfa_critical and sched.lane_urgent(req, now)
                    urgent = True
                rows.append((req, req.num_detokenized, len(req.output_ids), req.finished))
                req.num_detokenized = len(req.output_ids)
                req.detok_in_flight = True
            done = step + (rng.randint(1, 3) if lane else rng.randint(2, 12))
            in_flight.append((done, lane, rows))
            jobs.append((step, done, lane, urgent))
    return sched, requests, returned, jobs


def assert_every_chunk_came_back_once_in_order(sched, requests, returned) -> None:
    assert not sched.requests, "every request was flushed and removed"
    for req in requests:
        ranges = returned[req.request_id]
        # Contiguous from token 0 to the last: nothing decoded twice, skipped or reordered.
        assert ranges[0][0] == 0 and ranges[-1][1] == len(req.output_ids)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


@pytest.mark.parametrize("seed,step_s", [(0, 0.01), (1, 0.01), (2, 0.035), (3, 0.035)])
def test_chunks_of_every_request_come_back_once_and_in_order(seed, step_s):
    # Tokens at 4x real time (0.01 s a step) build deep buffers; at 0.035 s, barely faster
    # than real time, buffers run thin and chunks about to be late take the lane.
    sched, requests, returned, jobs = run_fake_engine(seed, 2, step_s=step_s)
    assert_every_chunk_came_back_once_in_order(sched, requests, returned)
    lane_jobs = [j for j in jobs if j[2]]
    steady_jobs = [j for j in jobs if not j[2]]
    assert lane_jobs and steady_jobs
    # The lane ran beside the steady job: some lane job was submitted while one was in flight.
    assert any(s0 <= l0 < s1 for l0, *_ in lane_jobs for s0, s1, *_ in steady_jobs)
    # With thin buffers, playing requests whose chunk would come late took the lane too (and
    # still came back in order, above); with deep ones only first chunks did.
    assert any(urgent for *_, urgent in lane_jobs) == (step_s > 0.01)


@pytest.mark.parametrize("seed", [0, 1])
def test_held_steady_jobs_are_fewer_and_every_chunk_still_comes_back_in_order(seed):
    runs = {}
    for rows in (0, 4):
        sched, requests, returned, jobs = run_fake_engine(seed, 2, steady_batch_rows=rows)
        assert_every_chunk_came_back_once_in_order(sched, requests, returned)
        runs[rows] = [j for j in jobs if not j[2]]
    assert len(runs[4]) < len(runs[0])  # fewer, larger steady jobs


def test_without_a_lane_every_chunk_takes_the_steady_job():
    sched, requests, returned, jobs = run_fake_engine(0, lane_room=0)
    assert not sched.requests
    assert jobs and not any(lane for _, _, lane, _ in jobs)
    for req in requests:
        assert returned[req.request_id][-1][1] == len(req.output_ids)
