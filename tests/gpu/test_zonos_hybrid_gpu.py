"""Zonos' hybrid backbone on the GPU: the PyTorch Mamba2 mixer and the whole backbone (paged
KV attention layers, Mamba2 layers on the per-request state pool) give on CUDA what they give
on the CPU, float32, for several requests whose prompts are prefilled in chunks and then
decoded together, one finishing early and its slot going to a newcomer. (The CPU path is
checked against transformers' Mamba2Mixer and a stateless reference in tests/models.)

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from engine.attention import KVCache, SdpaBackend, StepLayout
from models.layers.mamba2 import Mamba2Mixer, Mamba2Sizes
from models.zonos.checkpoint import ZonosWeights
from models.zonos.config import TINY_HYBRID

pytestmark = pytest.mark.gpu
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
BLOCK = 16


@pytest.fixture(autouse=True)
def exact_fp32(ieee_float32):
    """Every test here compares float32 paths at a tight tolerance."""


@torch.inference_mode()
def test_mixer_on_cuda_equals_the_cpu():
    sizes = Mamba2Sizes(64, d_state=16, headdim=16, ngroups=2, chunk_size=8)
    torch.manual_seed(0)
    cpu = Mamba2Mixer(sizes).eval()
    gpu = Mamba2Mixer(sizes).to(CUDA).eval()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 21, 64)
    conv = torch.zeros(3, sizes.conv_dim, sizes.d_conv - 1)
    ssm = torch.zeros(3, sizes.nheads, sizes.headdim, sizes.d_state)
    want, wc, ws = cpu.sequence(x, conv, ssm)
    got, gc, gs = gpu.sequence(x.to(CUDA), conv.to(CUDA), ssm.to(CUDA))
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-4)
    for _ in range(4):
        token = torch.randn(3, 64)
        want, wc, ws = cpu.step(token, wc, ws)
        got, gc, gs = gpu.step(token.to(CUDA), gc, gs)
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-4)


def _steps():
    """(request ids, starts, lengths) per step: prompts of 19, 11 and 6 tokens prefilled in
    chunks of at most 8 beside decodes; `b` ends after step 4 and `d` takes its slot."""
    return [
        (["a", "b"], [0, 0], [8, 8]),
        (["a", "b"], [8, 8], [8, 3]),
        (["a", "b", "c"], [16, 11, 0], [3, 1, 6]),
        (["a", "b", "c"], [19, 12, 6], [1, 1, 1]),
        (["a", "c", "d"], [20, 7, 0], [1, 1, 5]),
        (["a", "c", "d"], [21, 8, 5], [1, 1, 1]),
    ]


@torch.inference_mode()
def _run(weights: ZonosWeights, device: torch.device, tokens: dict[str, torch.Tensor]):
    backbone = weights.backbone
    pool = backbone.new_state_pool(device, torch.float32)
    s = weights.config.backbone
    cache = KVCache(
        len(s.attention_layers), 32, BLOCK, 2 * s.num_kv_heads, s.head_dim, torch.float32, device
    )
    attn = SdpaBackend(cache)
    tables = {"a": [0, 1], "b": [2], "c": [3], "d": [2]}  # d reuses b's page after b ends
    outs = []
    for step, (ids, starts, lens) in enumerate(_steps()):
        if step == 4:
            pool.free("b")
        pool.begin_step(ids, starts, lens)
        x = torch.cat([tokens[r][p : p + n] for r, p, n in zip(ids, starts, lens, strict=True)])
        positions = [p + i for p, n in zip(starts, lens, strict=True) for i in range(n)]
        slots = [
            tables[r][q // BLOCK] * BLOCK + q % BLOCK
            for r, p, n in zip(ids, starts, lens, strict=True)
            for q in range(p, p + n)
        ]
        attn.prepare(
            StepLayout(
                lens,
                [p + n for p, n in zip(starts, lens, strict=True)],
                slots,
                [tables[r] for r in ids],
                BLOCK,
            )
        )
        pos = torch.tensor(positions, device=device)
        outs.append(backbone(x.to(device), pos, attn, pool).cpu())
    return outs


def test_hybrid_backbone_on_cuda_equals_the_cpu():
    torch.manual_seed(1)
    weights = ZonosWeights(TINY_HYBRID).eval()
    d = TINY_HYBRID.backbone.d_model
    tokens = {r: torch.randn(24, 2, d) for r in "abcd"}
    want = _run(weights, CPU, tokens)
    got = _run(weights.to(CUDA), CUDA, tokens)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
