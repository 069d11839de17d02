"""Qwen3-TTS's talker and depth stage with FlashInfer's fused kernels (what the engine switches
on beside FlashInfer attention) against the plain blocks, bf16 on the GPU: the same hidden
states and codebook logits within bf16 rounding. The wiring is checked exactly on the CPU
(tests/models/qwen3_tts/test_qwen3_tts_fused_blocks.py).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from models.csm.depth import FrameAttention
from tests.gpu.markers import needs_flashinfer
from tests.gpu.test_qwen3_tts_graphs_gpu import tiny_for_flashinfer

pytestmark = [pytest.mark.gpu, needs_flashinfer]
CUDA = torch.device("cuda")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_fused_talker_and_depth_stage_match_the_plain_blocks(tmp_path):
    from models.qwen3_tts.checkpoint import load_qwen3_tts

    model = load_qwen3_tts(str(tiny_for_flashinfer(tmp_path)), CUDA, torch.bfloat16, name="tiny")
    talker, predictor = model.talker, model.predictor
    g = torch.Generator().manual_seed(3)
    t, k = 9, talker.num_codebooks
    rows = torch.randint(0, talker.code_vocab, (t, k + 1), generator=g)
    rows[:3, 1:k] = -1
    rows, positions = rows.to(CUDA), torch.arange(t, device=CUDA)
    hidden0 = torch.randn(3, talker.args.hidden_size, generator=g).to(CUDA, torch.bfloat16)
    first = torch.tensor([3, 17, 40], device=CUDA)
    out = {}
    for fused in (False, True):
        if fused:
            assert model.use_fused_kernels()
        attn = FrameAttention(talker.args.num_layers, t, talker.args.num_kv_heads,
                              talker.args.head_dim)  # fmt: skip
        attn.begin(1, CUDA, torch.bfloat16)
        attn.at(0, t)
        logits = []

        def greedy(scores: torch.Tensor, codebook: int, seen=logits) -> torch.Tensor:
            seen.append(scores)
            return scores.argmax(-1)

        with torch.inference_mode():
            hidden = talker(rows, positions, attn)
            predictor.generate(hidden0, first, greedy)
        out[fused] = (hidden, logits[0])
    assert relative(out[True][0], out[False][0]) < 2e-2
    assert relative(out[True][1], out[False][1]) < 2e-2  # codebook 1 (its input is the same)
