"""Real-time admission expects a stream's length from its text (engine/speech_lengths.py), not
from its max_tokens: learned from the requests that stopped by themselves."""

from __future__ import annotations

import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from engine.speech_lengths import MARGIN, MIN_SAMPLES, SpeechLengths
from models.registry import load_model
from voxbench.realtime_sim import RealtimeSim, TurnCost, steady_arrivals


def test_no_bound_until_enough_requests_ended_by_themselves():
    lengths = SpeechLengths(slack_tokens=10)
    for _ in range(MIN_SAMPLES - 1):
        lengths.observe(50, 200)
    assert lengths.bound(50) is None
    lengths.observe(50, 200)
    assert lengths.bound(50) == pytest.approx(MARGIN * 4 * 50 + 10, abs=1)
    assert lengths.bound(0) is None  # no text: nothing to go by


def test_the_bound_follows_a_high_quantile_of_the_pace_not_one_outlier():
    """Texts spoken at 2 to 4 tokens a character: the bound covers the slowest pace but one
    request that ran ten times as long (a stuck generation) moves it nothing."""
    lengths = SpeechLengths(slack_tokens=0)
    for i in range(100):
        lengths.observe(100, 200 + 2 * i)  # 2.00 … 3.98 tokens a character
    slowest = lengths.bound(100)
    assert MARGIN * 3.9 * 100 <= slowest <= MARGIN * 3.98 * 100 + 1
    lengths.observe(100, 4000)
    assert slowest <= lengths.bound(100) <= MARGIN * 3.98 * 100 + 1  # one rank up, no more
    lengths.observe(0, 300)  # ignored: no text
    lengths.observe(10, 0)  # ignored: no tokens
    assert lengths.samples == 101


FACTS = ChunkingFacts(first_chunk_tokens=4, chunk_tokens=8, seconds_per_token=0.04)


def scheduler_with(min_tokens: int = 0) -> Scheduler:
    """A scheduler that saw MIN_SAMPLES requests of 100 characters stop after 300 tokens."""
    sched = Scheduler(EngineConfig(), BlockManager(num_blocks=4096, block_size=16), FACTS)
    for _ in range(MIN_SAMPLES):
        request = Request([1] * 8, SamplingParams(min_tokens=min_tokens), 0.0, text_chars=100)
        request.output_ids = [7] * 300
        sched.finish_generation(request, RequestStatus.FINISHED_STOPPED)
    return sched


def test_requests_that_stop_by_themselves_teach_the_scheduler_their_pace():
    sched = scheduler_with()
    bound = sched.admission.lengths.bound(100)
    assert 300 < bound < 1200
    ahead = Request([1] * 8, SamplingParams(max_tokens=1200), 0.0, text_chars=100)
    assert sched.admission.outlook(ahead, 0.0).remaining_tokens == bound
    ahead.output_ids = [7] * 100
    assert sched.admission.outlook(ahead, 0.0).remaining_tokens == bound - 100
    # Past its bound a stream is judged by its ceiling again.
    ahead.output_ids = [7] * bound
    assert sched.admission.outlook(ahead, 0.0).remaining_tokens == 1200 - bound
    # A text of no known length (a conversation's turns, streamed text) has its ceiling ...
    unknown = Request([1] * 8, SamplingParams(max_tokens=1200), 0.0)
    assert sched.admission.outlook(unknown, 0.0).remaining_tokens == 1200
    # ... and a length the request asked for is what it makes.
    exact = Request([1] * 8, SamplingParams(min_tokens=900, max_tokens=900), 0.0, text_chars=100)
    assert sched.admission.outlook(exact, 0.0).remaining_tokens == 900
    short = Request([1] * 8, SamplingParams(max_tokens=200), 0.0, text_chars=100)
    assert sched.admission.outlook(short, 0.0).remaining_tokens == 200


def test_only_requests_that_stopped_by_themselves_teach():
    """A stop token after a model's own floor (CosyVoice 2's 2 a text token, as min_tokens)
    teaches; a request ended by its max_tokens (a benchmark's fixed length) does not."""
    assert scheduler_with(min_tokens=200).admission.lengths.samples == MIN_SAMPLES
    sched = scheduler_with()
    ran_out = Request([1] * 8, SamplingParams(max_tokens=50), 0.0, text_chars=100)
    ran_out.output_ids = [7] * 50
    sched.finish_generation(ran_out, RequestStatus.FINISHED_LENGTH)
    assert sched.admission.lengths.samples == MIN_SAMPLES


# A device whose decode turns grow with the KV pages they read (a GPU at hundreds of streams),
# streams of 2.5 s of 86-token-a-second speech that ask for the default ceiling of 1,200
# tokens (14 s), arriving at 120 a second.
TOKEN_S = 1 / 86
PAGED = TurnCost(fixed_s=0.00275, per_row_s=0.0000087, prompt_token_s=0.000002, per_page_s=4e-6)
PAGED_FACTS = ChunkingFacts(
    first_chunk_tokens=28, chunk_tokens=28, seconds_per_token=TOKEN_S, frame_tokens=7
)


def serve(learn: bool, exact: bool = False):
    seeds = {rows: PAGED.seen(rows, 0, 30 * rows) for rows in (1, 8, 64, 128, 256)}
    sim = RealtimeSim(PAGED, PAGED_FACTS, seeds, max_num_seqs=512)
    if not learn:
        sim.scheduler.admission.lengths.min_samples = 10**9
    ceiling = {} if exact else {"max_tokens": 1200, "text_chars": 40}
    result = sim.run(
        steady_arrivals(960, 120), stream_tokens=215, until_s=8, prompt_tokens=60, **ceiling
    )
    return sim, result


def test_admission_learns_how_long_streams_run_and_lets_in_what_the_device_carries():
    """Judged by their 14-s ceiling, streams that end after 2.5 s look like a load the device
    cannot carry: admission lets in under half of what it does when it knows their length.
    Learning the texts' pace from the first streams that end, it lets in nearly as many, and
    no listener runs dry in any of the three."""
    _, known = serve(learn=True, exact=True)
    _, ceiling = serve(learn=False)
    sim, learned = serve(learn=True)
    assert sim.scheduler.admission.lengths.samples >= MIN_SAMPLES
    assert ceiling.peak_streams < 0.5 * known.peak_streams
    assert learned.peak_streams >= 0.75 * known.peak_streams
    for result in (known, ceiling, learned):
        assert not result.late_streams and result.worst_lead_s == 0.0


def test_the_engine_counts_the_characters_a_request_speaks():
    core = EngineCore(load_model("tiny-orpheus"), EngineConfig(), torch.device("cpu"), "sdpa")
    request = core.add_request(SpeechRequest("Hello there.", sampling=SamplingParams(max_tokens=8)))
    assert request.text_chars == len("Hello there.")


def test_a_models_length_rule_bounds_a_request_that_does_not_fix_its_own():
    default = SamplingParams()
    assert default.within(None) is default
    assert (default.within((20, 200)).min_tokens, default.within((20, 200)).max_tokens) == (20, 200)
    asked = SamplingParams(min_tokens=50, max_tokens=100)
    assert (asked.within((20, 200)).min_tokens, asked.within((20, 200)).max_tokens) == (50, 100)
    short = SamplingParams(max_tokens=10)  # the request's ceiling under the rule's floor
    assert (short.within((20, 200)).min_tokens, short.within((20, 200)).max_tokens) == (10, 10)
    exact = SamplingParams(min_tokens=300, max_tokens=300)
    assert exact.within((20, 200)) is exact
    assert SamplingParams().within((0, 0)).max_tokens == 1  # an empty rule leaves one token
