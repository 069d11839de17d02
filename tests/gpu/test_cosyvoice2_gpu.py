"""CosyVoice 2 on the GPU: async scheduling (repetition-aware sampling's window is a ring on the
device) gives the synchronous step's seeded tokens and audio.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.cosyvoice2 import configs
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from tests.models.test_cosyvoice2 import async_and_sync_runs

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def test_cosyvoice2_async_scheduling_equals_sync_on_gpu(tmp_path, ieee_float32):
    """A race between the overlapped host work and the device (the RAS ring read before the
    previous step's token lands, the stop mask, pinned copies) would change a seeded token."""
    folder = tmp_path / "model"
    write_cosyvoice2_checkpoint(folder, configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025)
    model = load_cosyvoice2(str(folder), CUDA, torch.float32, name="tiny-cosyvoice2")
    sync, overlapped = async_and_sync_runs(model, CUDA, ["narrator", "guide", "narrator", "guide"])
    assert [tokens for tokens, _ in overlapped] == [tokens for tokens, _ in sync]
    for (_, pcm), (_, a_pcm) in zip(sync, overlapped, strict=True):
        np.testing.assert_allclose(a_pcm, pcm, atol=1e-4)
