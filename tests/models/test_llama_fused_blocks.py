"""The Llama blocks' fused path (what `use_fused_kernels` switches on beside FlashInfer
attention on a GPU: the residual carried apart and added inside each norm, RoPE on the
projection's views, SiLU·mul, Qwen3's per-head norms) against the plain blocks, with the fused
kernels' contract in plain torch (tests/models/torch_llama_kernels.py), float32 on the CPU, for
Llama's, Qwen2's and Qwen3's blocks. tests/gpu/test_fused_blocks_gpu.py runs FlashInfer's."""

from __future__ import annotations

import pytest
import torch

from tests.models.torch_llama_kernels import (
    BLOCK_KINDS,
    TorchLlamaKernels,
    causal_hidden,
    random_stack,
)


@pytest.mark.parametrize("kind", sorted(BLOCK_KINDS))
def test_the_fused_path_equals_the_plain_blocks(kind):
    llm = random_stack(kind, head_dim=16, scale=0.3)
    ids = torch.randint(0, 500, (11,), generator=torch.Generator().manual_seed(1))
    plain = causal_hidden(llm, ids, start=3)
    llm.kernels = TorchLlamaKernels(llm.rotary, llm.args.head_dim)
    torch.testing.assert_close(causal_hidden(llm, ids, start=3), plain, atol=1e-5, rtol=1e-5)
