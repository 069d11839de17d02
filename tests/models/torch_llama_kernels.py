"""The fused Llama kernels' contract (models/layers/fused_kernels.py, FlashInferLlamaKernels) in
plain torch, float32 on the CPU: with it, a model's fused block path (the residual carried
apart and added inside each norm, per-head norms and RoPE on the projection's views, SiLU·mul)
runs where FlashInfer cannot, so its wiring is checked against the plain blocks in CI. The
kernels themselves are checked on a GPU (tests/gpu)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.layers.rope import Rotary, apply_rotary


class TorchLlamaKernels:
    def __init__(self, rotary: Rotary, head_dim: int) -> None:
        self.rotary = rotary
        self.head_dim = head_dim

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return F.rms_norm(x, weight.shape, weight, eps)

    def add_rmsnorm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        residual += x  # in place, as FlashInfer's fused_add_rmsnorm
        x.copy_(self.rmsnorm(residual, weight, eps))
        return x, residual

    def head_rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        t = x.shape[0]
        return self.rmsnorm(x.reshape(-1, self.head_dim), weight, eps).view(t, -1)

    def rope_(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> None:
        cos, sin = self.rotary.cos_sin(positions, q.dtype)
        for x in (q, k):
            heads = x.view(x.shape[0], -1, self.head_dim)
            heads.copy_(apply_rotary(heads, cos, sin))

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
