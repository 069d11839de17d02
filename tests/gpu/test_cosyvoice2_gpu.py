"""CosyVoice 2 on the GPU: async scheduling (repetition-aware sampling's window is a ring on the
device) gives the synchronous step's seeded tokens and audio.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.cosyvoice2 import configs
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from tests.models.test_cosyvoice2 import TEXTS, run

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.fixture
def no_tf32():
    """fp32 convolutions run in TF32 on CUDA by default, and the detokenizer's jobs group
    different requests in the two runs (their timing differs), so TF32's rounding would differ
    by batch composition; full fp32 keeps the audio comparable at a tight tolerance."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_cosyvoice2_async_scheduling_equals_sync_on_gpu(tmp_path, no_tf32):
    """A race between the overlapped host work and the device (the RAS ring read before the
    previous step's token lands, the stop mask, pinned copies) would change a seeded token."""
    folder = tmp_path / "model"
    write_cosyvoice2_checkpoint(folder, configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025)
    model = load_cosyvoice2(str(folder), CUDA, torch.float32, name="tiny-cosyvoice2")
    specs = [
        SpeechRequest(t, v, SamplingParams(seed=i, max_tokens=n, min_tokens=n))
        for i, (t, v, n) in enumerate(
            zip(TEXTS, ["narrator", "guide", "narrator", "guide"], [30, 12, 26, 18], strict=True)
        )
    ]
    results = {}
    for overlapped in (False, True):
        config = EngineConfig(
            max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=64, async_scheduling=overlapped
        )
        core = EngineCore(model, config, CUDA, "sdpa")
        assert core.async_scheduling == overlapped
        requests, audio, _, _ = run(core, copy.deepcopy(specs))
        results[overlapped] = [
            (r.output_ids, np.concatenate(audio[r.request_id])) for r in requests
        ]
        assert core.blocks.num_used == 0
    sync_tokens = [tokens for tokens, _ in results[False]]
    assert [tokens for tokens, _ in results[True]] == sync_tokens
    for (_, pcm), (_, a_pcm) in zip(results[False], results[True], strict=True):
        np.testing.assert_allclose(a_pcm, pcm, atol=1e-4)
