"""Chatterbox's per-request options on the GPU: the emotion row read back from its float bits
and the per-row CFG mix give on CUDA what they give on the CPU, and a batch of requests with
different options decodes on CUDA to the CPU engine's greedy tokens (in float32, as the
comparison needs, so on sdpa: FlashInfer computes in bfloat16 or float16 only).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.family import FAMILY
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.registry import with_request_options

pytestmark = pytest.mark.gpu
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
OPTIONS = [{"exaggeration": 1.7, "cfg_weight": 0.0}, {"exaggeration": 0.2}, {"cfg_weight": 1.0}]
TEXTS = ["Hello there.", "A longer sentence to say now.", "Third!"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("chatterbox"))


def model_on(folder, device) -> ChatterboxModel:
    """The model as the registry serves it: announcing its family's request options."""
    return with_request_options(
        ChatterboxModel(load_chatterbox(folder, device, torch.float32)), FAMILY
    )


def test_option_dependent_parts_equal_the_cpu(folder):
    cpu, gpu = model_on(folder, CPU), model_on(folder, CUDA)
    prompts = [cpu.preprocess_with_options("Hi.", None, {**o}) for o in OPTIONS]
    emotion_rows = torch.tensor([p.token_ids[cpu._cond_rows - 1] for p in prompts])
    on_cpu = cpu.embed(emotion_rows)
    torch.testing.assert_close(gpu.embed(emotion_rows.to(CUDA)).cpu(), on_cpu)
    assert not torch.equal(on_cpu[0], on_cpu[1])  # each request its own exaggeration
    hidden = torch.randn(3, cpu.shape.hidden_size)
    full = [{"exaggeration": 0.5, "cfg_weight": 0.5, **o} for o in OPTIONS]
    want = cpu.candidates_with_options(hidden, [0] * 3, [True] * 3, full).logits
    got = gpu.candidates_with_options(hidden.to(CUDA), [0] * 3, [True] * 3, full).logits
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


def greedy(model, device, attention) -> list[list]:
    config = EngineConfig(max_num_seqs=4, num_kv_blocks=128, block_size=16)
    core = EngineCore(model, config, device, attention)
    params = SamplingParams(temperature=0.0, repetition_penalty=1.2, max_tokens=16)
    specs = zip(TEXTS, OPTIONS, strict=True)
    reqs = [core.add_request(SpeechRequest(t, None, params, model_options=o)) for t, o in specs]
    while core.has_work():
        core.step()
    return [r.output_ids for r in reqs]


def test_a_batch_with_different_options_equals_the_cpu_engine(folder):
    want = greedy(model_on(folder, CPU), CPU, "sdpa")
    assert greedy(model_on(folder, CUDA), CUDA, "sdpa") == want
