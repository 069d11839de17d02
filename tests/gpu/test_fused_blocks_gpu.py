"""FlashInfer's fused kernels in the Llama blocks (models/layers/fused_kernels.py) against the
plain blocks, bf16 on the GPU, for Llama's blocks, Qwen2's (q/k/v biases: CosyVoice 2's LLM)
and Qwen3's (per-head q/k norms: Qwen3-TTS): the same hidden states within bf16 rounding. The
wiring is checked exactly on the CPU (tests/models/test_llama_fused_blocks.py).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.markers import needs_flashinfer
from tests.models.torch_llama_kernels import BLOCK_KINDS, causal_hidden, random_stack

pytestmark = [pytest.mark.gpu, needs_flashinfer]
CUDA = torch.device("cuda")


@pytest.mark.parametrize("kind", sorted(BLOCK_KINDS))
def test_flashinfers_fused_blocks_match_the_plain_ones(kind):
    llm = random_stack(kind, head_dim=64, scale=0.1).to(CUDA, torch.bfloat16)  # FlashInfer: 64+
    ids = torch.randint(0, 500, (33,), device=CUDA)
    plain = causal_hidden(llm, ids, start=5)
    assert llm.use_fused_kernels()
    fused = causal_hidden(llm, ids, start=5)
    assert ((fused - plain).norm() / plain.norm()).item() < 2e-2
