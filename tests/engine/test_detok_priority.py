"""The engine keeps one detokenizer job in flight: chunks that become ready meanwhile wait, and
the next job takes them all, most urgent first (tiny-cosyvoice2, whose flow call costs the same
for one request as for many)."""

from __future__ import annotations

import itertools

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.detok_job import Detokenizer, DetokJob, run_job
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model


class HeldDetokenizer(Detokenizer):
    """ThreadedDetokenizer's contract on the CPU: a job stays in flight until `release`."""

    def __init__(self, model, clock) -> None:
        self.model, self.clock = model, clock
        self.held: DetokJob | None = None
        self.done: list[DetokJob] = []
        self.jobs: list[list[str]] = []  # each submitted job's request ids, in its order

    @property
    def in_flight(self) -> int:
        return int(self.held is not None) + len(self.done)

    def submit(self, job: DetokJob) -> None:
        assert self.in_flight == 0, "a job was submitted while another was in flight"
        self.jobs.append([r.request_id for r in job.requests])
        self.held = job

    def release(self) -> None:
        self.done.append(run_job(self.model, self.held, self.clock))
        self.held = None

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        done, self.done = self.done, []
        return done

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-cosyvoice2")


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n)


def held_core(model) -> tuple[EngineCore, HeldDetokenizer]:
    """An engine on a fake clock (1 ms a reading) whose detokenizer jobs stay in flight until
    released. No cover margin: a first chunk goes out at first_chunk_tokens (the cover rule
    has its own tests in test_scheduler.py)."""
    ticks = itertools.count()
    clock = lambda: next(ticks) * 1e-3  # noqa: E731 - a fake clock
    config = EngineConfig(num_kv_blocks=64, first_audio_margin=0.0)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa", clock)
    core.detok = held = HeldDetokenizer(model, clock)
    return core, held


def test_chunks_ready_during_a_job_wait_and_go_together_first_chunks_first(model):
    core, held = held_core(model)
    audio: dict[str, int] = {}

    def step() -> None:
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio[event.request_id] = audio.get(event.request_id, 0) + len(event.pcm)

    first, chunk = model.facts.first_chunk_tokens, model.facts.chunk_tokens
    a = core.add_request(SpeechRequest("Hello there.", None, greedy(first + 40)))
    while not held.jobs:
        step()
    assert held.jobs == [[a.request_id]] and len(a.output_ids) == first
    # While A's first chunk is in flight, B arrives; A's second chunk and B's first one
    # become ready. Neither is submitted (HeldDetokenizer.submit would fail).
    b = core.add_request(SpeechRequest("A newcomer.", None, greedy(first + 5)))
    while a.pending_detok_tokens < chunk or b.pending_detok_tokens < first:
        step()
    assert len(held.jobs) == 1
    held.release()
    step()
    assert a.first_audio_time is not None
    # One job for both; B, still waiting for its first audio, goes first though A came first.
    assert held.jobs[1] == [b.request_id, a.request_id]
    while core.has_work():
        if held.held is not None:
            held.release()
        step()
    # Every token's audio came out, once (2 mel frames of 480 samples per token).
    samples_per_token = round(model.facts.sample_rate * model.facts.seconds_per_token)
    assert audio == {
        a.request_id: (first + 40) * samples_per_token,
        b.request_id: (first + 5) * samples_per_token,
    }


def test_a_chunk_in_flight_counts_as_undecoded_until_its_audio_is_out(model):
    """Real-time admission counts a stream's tokens as its listener's audio from when they are
    made (Request.undecoded_tokens): a job taking them leaves the count as it was until its
    audio goes out, where a stream's decoding chunk would otherwise look like a listener
    running short."""
    core, held = held_core(model)
    first = model.facts.first_chunk_tokens
    a = core.add_request(SpeechRequest("Hello there.", None, greedy(first + 10)))
    while not held.jobs:
        core.step()
    assert a.detok_in_flight_tokens == first and a.pending_detok_tokens == 0
    core.step()  # more tokens while the chunk is decoded: both kinds counted
    assert a.pending_detok_tokens > 0
    assert a.undecoded_tokens == len(a.output_ids) and a.first_audio_time is None
    held.release()
    core.step()
    assert a.first_audio_time is not None and a.detok_in_flight_tokens == 0
    assert a.undecoded_tokens == a.pending_detok_tokens
