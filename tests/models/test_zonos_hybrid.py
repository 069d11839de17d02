"""Zonos v0.1 hybrid (Mamba2 + attention) through the engine, float32 on the CPU, the
tiny-zonos-hybrid preset's seeded random weights loaded through the real loader:

- batched greedy grids, with prompts prefilled in chunks beside other requests' decodes,
  equal a stateless reference that recomputes the whole sequence every step with
  transformers' Mamba2Mixer for the Mamba2 layers (tests/models/zonos_hybrid_reference.py says
  why not the official hybrid: it needs mamba-ssm's CUDA kernels);
- requests served together get the audio each gets alone (each owns its recurrent state);
- a request cancelled mid-stream gives its state back, and the others are untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model
from models.zonos import rows as R
from models.zonos.hybrid import HybridBackbone
from models.zonos.phonemes import espeak_available
from models.zonos.presets import ensure_tiny_zonos_hybrid
from tests.models.engine_run import run
from tests.models.zonos_hybrid_reference import reference_greedy_grid
from tests.torch_threads import one_torch_thread

pytestmark = pytest.mark.skipif(
    not espeak_available(),
    reason="Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`",
)
TEXTS = ["Hello, world!", "A second sentence, said slowly.", "Third."]
FRAMES = 14


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices: on a shared 2-core box a second thread only adds contention.
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def model():
    folder = ensure_tiny_zonos_hybrid() / "model"  # in the session's preset cache (conftest)
    # A folder, as a user passes one: the family recognises the hybrid's config.json.
    loaded = load_model(str(folder), None, torch.device("cpu"), torch.float32)
    assert isinstance(loaded.weights.backbone, HybridBackbone)
    return loaded


def _core(model, max_batch_tokens: int = 24) -> EngineCore:
    # A small token budget: prompts (20-40 rows) are prefilled in chunks, beside decodes. No
    # real-time admission: a loaded CPU is no measure of it, and these requests must all run.
    config = EngineConfig(
        max_num_seqs=4,
        max_batch_tokens=max_batch_tokens,
        num_kv_blocks=64,
        block_size=16,
        realtime_admission=False,
    )
    return EngineCore(model, config, torch.device("cpu"), "sdpa")


def _spec(text: str) -> SpeechRequest:
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=FRAMES)
    return SpeechRequest(text, None, params)


def _pcm(audio, request) -> np.ndarray:
    return np.concatenate(audio.get(request.request_id, [np.zeros(0, np.float32)]))


@pytest.fixture(scope="module")
def batched(model):
    core = _core(model)
    requests, audio, _, peak = run(core, [_spec(t) for t in TEXTS])
    assert peak >= 2  # they shared steps
    assert core.blocks.num_used == 0 and model.recurrent_state.live == 0
    return requests, audio


def test_batched_greedy_grids_equal_the_stateless_reference(model, batched):
    requests, _ = batched
    for request in requests:
        want = reference_greedy_grid(model, request.prompt_ids, FRAMES)
        assert [row[: R.N_CODEBOOKS] for row in request.output_ids] == [
            row[: R.N_CODEBOOKS] for row in want
        ]


def test_requests_together_get_the_audio_each_gets_alone(model, batched):
    requests, audio = batched
    for text, request in zip(TEXTS, requests, strict=True):
        alone_requests, alone_audio, _, _ = run(_core(model), [_spec(text)])
        assert alone_requests[0].output_ids == request.output_ids
        alone, together = _pcm(alone_audio, alone_requests[0]), _pcm(audio, request)
        assert len(alone) == len(together) > 0
        np.testing.assert_allclose(together, alone, atol=1e-5)


def test_a_cancelled_request_gives_its_state_back_and_the_others_go_on(model, batched):
    requests, audio = batched
    pool = model.recurrent_state
    core = _core(model, max_batch_tokens=256)
    kept = core.add_request(_spec(TEXTS[0]))
    dropped = core.add_request(_spec(TEXTS[1]))
    for _ in range(4):  # both prefilled and decoding
        core.step()
    assert pool.live == 2 and len(dropped.output_ids) > 0
    slot = pool.slot_of(dropped.request_id)
    core.cancel(dropped.request_id)
    assert pool.live == 1 and pool.slot_of(dropped.request_id) is None
    late = core.add_request(_spec(TEXTS[2]))
    core.step()
    assert pool.slot_of(late.request_id) == slot  # the freed slot, prefilled from zero state
    while core.has_work():
        core.step()
    assert pool.live == 0
    assert kept.output_ids == requests[0].output_ids
    assert late.output_ids == requests[2].output_ids
