"""models/layers/llama.py pieces that have a CPU fast path: it must equal the plain formula."""

from __future__ import annotations

import pytest
import torch

from models.layers.llama import RMSNorm


@pytest.mark.parametrize("hidden", [64, 320, 3072])
@pytest.mark.parametrize("rows", [1, 4, 37])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_rms_norm_cpu_fast_path_is_bit_identical_to_the_formula(hidden, rows, scale):
    torch.manual_seed(hidden + rows)
    norm = RMSNorm(hidden, 1e-5)
    norm.weight.data.normal_()
    x = torch.randn(rows, hidden) * scale
    with torch.inference_mode():
        fast = norm(x)
        # The reference (transformers' LlamaRMSNorm): float32 statistics, then the weight.
        want = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps))
    assert torch.equal(fast, want)
