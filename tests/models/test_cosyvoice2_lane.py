"""CosyVoice 2's first-chunk detokenizer lane through the engine on the CPU: a threaded
detokenizer (the GPU's pipeline, without streams) whose steady job is held while new requests'
first chunks go out on the lane beside it, on the lane's own twin detokenizer. The audio equals
the model's own detokenizer fed the same pushes one request at a time."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.detok_pipeline import InlineDetokenizer, make_detokenizer
from engine.detok_threads import ThreadedDetokenizer
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.codecs.flow_hift.lane import FlowHiftLane
from models.cosyvoice2.family import CosyVoiceLoadOptions
from models.registry import load_model
from tests.models.lane_codecs import LoggedCodec, held_lane_engine, run_until

CPU = torch.device("cpu")
# Real-time admission off: it is not what these tests are about, and the first request's
# measured turns on a busy CPU (the suite's other worker) can refuse the one that arrives
# beside it, as can its listener running short of audio while the steady job is held.
LANE_CONFIG = EngineConfig(
    num_kv_blocks=64, max_num_seqs=4, max_batch_tokens=64, realtime_admission=False
)


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-cosyvoice2")


def served_with(model, **options):
    """`model` served with these CosyVoice 2 options (as `voxgate serve` would load it); undo
    with `model.facts = kept`."""
    kept = model.facts
    CosyVoiceLoadOptions(**options).apply(model)
    return kept


@pytest.fixture
def unbatched(model):
    """The model with steady jobs of any size (--steady-batch-rows 0; the hold has its own
    tests)."""
    kept = served_with(model, steady_batch_rows=0)
    yield model
    model.facts = kept


def spec(text: str, n: int, seed: int) -> SpeechRequest:
    return SpeechRequest(text, None, SamplingParams(seed=seed, max_tokens=n, min_tokens=n))


def test_first_chunks_skip_the_steady_job_and_audio_equals_the_models_own(unbatched):
    model = unbatched  # a steady job for one row
    config = LANE_CONFIG
    # CosyVoice 2's own margin reaches the scheduler (it applies with a threaded codec, on
    # CUDA, unless the config sets one, as here).
    default = EngineCore(model, dataclasses.replace(config, num_kv_blocks=8), CPU, "sdpa")
    assert default.scheduler.facts.first_audio_margin == model.facts.first_audio_margin == 2.0
    default.close()
    config = dataclasses.replace(config, first_audio_margin=0.0)  # first chunk at 23 tokens
    core = EngineCore(model, config, CPU, "sdpa")
    pushes, steady = held_lane_engine(model, core, CPU)
    audio: dict[str, list[np.ndarray]] = {}
    request_of: dict[int, str] = {}  # id of a stream state -> its request

    def add(s: SpeechRequest):
        r = core.add_request(s)
        request_of[id(core.worker.stream_state(r.request_id))] = r.request_id
        audio[r.request_id] = []
        return r

    def step_until(done) -> None:
        run_until(core, done, audio)

    try:
        a = add(spec("Hello there.", 80, seed=1))
        # A's first chunk goes out on the lane although the steady codec is shut.
        step_until(lambda: a.first_audio_time is not None)
        # A's second chunk goes to the steady job, which is held.
        step_until(lambda: core.detok.steady_in_flight == 1)
        b = add(spec("A newcomer.", 40, seed=2))
        step_until(lambda: b.first_audio_time is not None)
        # B's first audio came out while A's steady job was still in flight.
        assert core.detok.steady_in_flight == 1 and a.audio_chunks_out == 1
        steady.gate.set()
        step_until(lambda: not core.has_work())
    finally:
        steady.gate.set()
        core.close()

    assert core.lane_jobs == 2
    lane_rows = [(request_of[sid], fin) for sid, _, fin, on_lane in pushes if on_lane]
    assert lane_rows == [(a.request_id, False), (b.request_id, False)]
    # Every request's audio equals the model's detokenizer given the same pushes alone.
    for r in (a, b):
        mine = [(toks, fin) for sid, toks, fin, _ in pushes if request_of[sid] == r.request_id]
        assert sum(len(toks) for toks, _ in mine) == len(r.output_ids)  # each token once
        state = model.stream_state_for(r.extras)
        expected = [model.detokenize([state], [toks], [fin])[0] for toks, fin in mine]
        got = np.concatenate(audio[r.request_id])
        # The tolerance of the batch-of-N == N singles test (tests/models/test_flow_hift.py).
        np.testing.assert_allclose(got, np.concatenate(expected), atol=1e-5)

    # The same seeded requests without the lane (inline codec): the same tokens.
    plain = EngineCore(model, config, CPU, "sdpa")
    ra = plain.add_request(spec("Hello there.", 80, seed=1))
    rb = plain.add_request(spec("A newcomer.", 40, seed=2))
    while plain.has_work():
        plain.step()
    assert (ra.output_ids, rb.output_ids) == (a.output_ids, b.output_ids)


def test_chunks_about_to_be_late_take_the_lane_while_the_steady_job_is_held(unbatched):
    """Scheduler.lane_urgent: a playing stream's chunk that would come late behind the steady
    job goes out on the lane, even a stream the lane did not begin; its audio stays in order and
    equals the model's own detokenizer fed the same pushes."""
    model = unbatched
    config = dataclasses.replace(LANE_CONFIG, first_audio_margin=0.0)
    core = EngineCore(model, config, CPU, "sdpa")
    pushes: list[tuple] = []
    steady = LoggedCodec(model, pushes, lane=False, gated=True)
    core.detok = ThreadedDetokenizer(
        steady, core.clock, CPU, LoggedCodec(model.first_chunk_lane_codec(), pushes, lane=True)
    )
    audio: dict[str, list[np.ndarray]] = {}
    state_of: dict[str, int] = {}

    def step_until(done) -> None:
        run_until(core, done, audio)

    try:
        held = core.add_request(spec("Hello there.", 80, seed=1))
        step_until(lambda: core.detok.steady_in_flight == 1)  # its second chunk, held
        core.scheduler.lane_urgent = lambda request, now: True  # every listener runs thin
        a = core.add_request(spec("A newcomer with more to say.", 90, seed=2))
        state_of[a.request_id] = id(core.worker.stream_state(a.request_id))
        step_until(lambda: a.detok_done)  # all of it while the steady job stayed held
        assert core.detok.steady_in_flight == 1 and held.audio_chunks_out == 1
        steady.gate.set()
        step_until(lambda: not core.has_work())
    finally:
        steady.gate.set()
        core.close()

    mine = [(toks, fin, lane) for sid, toks, fin, lane in pushes if sid == state_of[a.request_id]]
    assert len(mine) >= 3 and all(lane for *_, lane in mine)
    assert sum(len(toks) for toks, *_ in mine) == len(a.output_ids)
    state = model.stream_state_for(a.extras)
    expected = [model.detokenize([state], [toks], [fin])[0] for toks, fin, _ in mine]
    np.testing.assert_allclose(
        np.concatenate(audio[a.request_id]), np.concatenate(expected), atol=1e-5
    )


def test_the_lane_exists_only_for_models_that_offer_it_and_when_asked(model):
    clock = time.monotonic
    default = make_detokenizer(model, EngineConfig(), clock, CPU, threaded=True)  # on by default
    kept = served_with(model, first_chunk_lane=True)
    on = make_detokenizer(model, EngineConfig(), clock, CPU, threaded=True)
    served_with(model, first_chunk_lane=False)  # --no-first-chunk-lane
    off = make_detokenizer(model, EngineConfig(), clock, CPU, threaded=True)
    model.facts = kept

    class NoLane:  # a model without the capability: its lane codec is never asked for
        facts = dataclasses.replace(model.facts, first_chunk_lane=False)
        detokenize = model.detokenize

        def first_chunk_lane_codec(self):
            raise AssertionError("asked a model without a first-chunk lane for one")

    without = make_detokenizer(NoLane(), EngineConfig(), clock, CPU, threaded=True)
    inline = make_detokenizer(model, EngineConfig(), clock, CPU, threaded=False)
    try:
        assert on.lane_room == default.lane_room == FlowHiftLane.GRAPH_ROWS[-1]
        assert off.lane_room == without.lane_room == inline.lane_room == 0
        assert isinstance(inline, InlineDetokenizer)
        with pytest.raises(RuntimeError, match="no first-chunk lane"):
            without.submit_lane(None)
    finally:
        for d in (on, off, without, inline):
            d.close()


def test_the_familys_serving_options_reach_the_models_facts(model):
    """`voxgate serve --no-first-chunk-lane --steady-batch-rows 4 --no-codec-pacing` reach the
    engine as the loaded model's facts; unset, the model serves with its own."""
    assert (model.facts.first_chunk_lane, model.facts.steady_batch_rows) == (True, 16)
    assert model.facts.codec_pacing and model.facts.compile_codec
    options = {"first_chunk_lane": False, "steady_batch_rows": 4, "codec_pacing": False}
    tuned = load_model("tiny-cosyvoice2", options=options)
    assert (tuned.facts.first_chunk_lane, tuned.facts.steady_batch_rows) == (False, 4)
    assert not tuned.facts.codec_pacing and tuned.facts.compile_codec
