"""Qwen3-TTS's talker and depth stage through the fused block path (what `use_fused_kernels`
switches on beside FlashInfer attention on a GPU), with the fused kernels' contract in plain
torch (tests/models/torch_llama_kernels.py): the same hidden states and codes as the plain
blocks, float32 on the CPU. tests/gpu/test_qwen3_tts_fused_gpu.py runs FlashInfer's own."""

from __future__ import annotations

import torch

from models.csm.depth import FrameAttention
from tests.models.torch_llama_kernels import TorchLlamaKernels, fused_with


def kernels_of(stack) -> TorchLlamaKernels:
    return TorchLlamaKernels(stack.rotary, stack.args.head_dim)


def test_the_talker_fused_equals_plain(model):
    talker = model.talker
    g = torch.Generator().manual_seed(3)
    t, k = 9, talker.num_codebooks
    rows = torch.randint(0, talker.code_vocab, (t, k + 1), generator=g)
    rows[:, k] = torch.randint(0, 100, (t,), generator=g)  # a text id in every row
    rows[:3, 1:k] = -1  # rows without residual codes, as a prompt's text rows
    positions = torch.arange(t)
    hidden = []
    for kernels in (None, kernels_of(talker)):
        attn = FrameAttention(talker.args.num_layers, t, talker.args.num_kv_heads,
                              talker.args.head_dim)  # fmt: skip
        attn.begin(1, positions.device, torch.float32)
        attn.at(0, t)
        with fused_with(talker, "kernels", kernels):
            hidden.append(talker(rows, positions, attn))
    torch.testing.assert_close(hidden[1], hidden[0], atol=1e-5, rtol=1e-5)


def test_the_depth_stage_fused_gives_the_plain_codes(model):
    predictor = model.predictor
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(3, model.shape.hidden_size, generator=g)
    first = torch.tensor([3, 17, 40])
    seen = []

    def greedy(logits: torch.Tensor, codebook: int) -> torch.Tensor:
        seen.append(logits)
        return logits.argmax(-1)

    codes = []
    for kernels in (None, kernels_of(predictor)):
        with fused_with(predictor, "kernels", kernels):
            codes.append(predictor.generate(hidden, first, greedy))
    assert torch.equal(codes[1], codes[0]) and codes[0].shape == (3, predictor.num_codebooks)
    half = len(seen) // 2
    for plain, fused in zip(seen[:half], seen[half:], strict=True):
        torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-5)
