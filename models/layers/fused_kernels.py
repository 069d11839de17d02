"""FlashInfer's fused kernels for the Llama block on NVIDIA GPUs.

The plain torch block (models/layers/llama.py) spends a decode step of a 3B model mostly in
small element-wise kernels: RMSNorm as five of them in float32, RoPE with a concatenation,
SiLU and the multiply apart, the residual adds apart (measured on the H200 at batch 64: ~1.8 ms
of a ~5.9 ms step, docs/benchmark-history.md). FlashInfer fuses each into one kernel: residual add +
RMSNorm, RoPE in place from a float32 cos/sin table, SiLU·mul. Used only for bf16/fp16 on CUDA
with the `gpu` extra installed; CPU and float32 keep the reference path, which the equality
tests against transformers run. The fused results differ from the reference only by rounding
(normalisation and rotation are computed in float32 and rounded once).
"""

from __future__ import annotations

import os

import torch

from models.layers.rope import Rotary


class FlashInferLlamaKernels:
    def __init__(
        self, rotary: Rotary, max_positions: int, head_dim: int, device: torch.device
    ) -> None:
        # The CUDA JIT kernels, not FlashInfer's CuTe-DSL ones, which need another package.
        os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")
        import flashinfer  # the optional `gpu` extra

        self._fi = flashinfer
        self.head_dim = head_dim
        positions = torch.arange(max_positions, device=device, dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.to(device)[None, :]  # [P, D/2]
        self.cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()  # [P, D] fp32

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self._fi.norm.rmsnorm(x, weight, eps, enable_pdl=False)

    def add_rmsnorm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rmsnorm(x + residual), x + residual), both updated in place."""
        self._fi.norm.fused_add_rmsnorm(x, residual, weight, eps, enable_pdl=False)
        return x, residual

    def head_rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """Qwen3's per-head norm: x [T, heads*D] (a view into the fused projection) → each
        head's RMSNorm, [T, heads*D] contiguous (one copy and one kernel, not eight)."""
        t = x.shape[0]
        heads = x.reshape(-1, self.head_dim)
        return self._fi.norm.rmsnorm(heads, weight, eps, enable_pdl=False).view(t, -1)

    def rope_(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> None:
        """q [T, Hq*D], k [T, Hkv*D] (views into the fused projection) rotated in place."""
        self._fi.rope.apply_rope_with_cos_sin_cache_inplace(
            positions, q, k, self.head_dim, self.cos_sin, is_neox=True
        )

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return self._fi.activation.silu_and_mul(gate_up, enable_pdl=False)


def fused_kernels_available(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True
