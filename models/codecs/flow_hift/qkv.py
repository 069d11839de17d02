"""The flow estimators' attention projections as one GEMM (FlowHiftDetokenizer.enable_cuda_graphs).

Why: a flow job is thousands of small kernels whatever its rows (docs/models.md): CosyVoice 2's
estimator runs 56 transformer blocks in each of its 10 Euler steps, and each block's query, key
and value projections were three GEMMs over the same input. Their weights side by side make one
GEMM, two kernels fewer a block: ~1,100 fewer a job. The checkpoints keep the three projections
(`to_q`, `to_k`, `to_v`), so they load as they are and are joined for serving."""

from __future__ import annotations

import torch
from torch import nn


class JoinableQkv(nn.Module):
    """An attention whose query, key and value projections (`to_q`, `to_k`, `to_v`, as its
    checkpoint names them) may be joined into one (`join_qkv`): `qkv(x)` gives (q, k, v)
    either way. Subclasses create the three projections."""

    def __init__(self) -> None:
        super().__init__()
        self.to_qkv: nn.Linear | None = None  # set by join_qkv

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.to_qkv is None:
            return self.to_q(x), self.to_k(x), self.to_v(x)
        return self.to_qkv(x).chunk(3, dim=-1)

    @torch.no_grad()
    def join_qkv(self) -> None:
        """One Linear whose outputs are the three projections' side by side (idempotent); the
        separate ones are dropped, so the weights are not kept twice."""
        if self.to_qkv is not None:
            return
        parts = self.to_q, self.to_k, self.to_v
        first = parts[0]
        joined = nn.Linear(
            first.in_features,
            sum(p.out_features for p in parts),
            bias=first.bias is not None,
            device=first.weight.device,
            dtype=first.weight.dtype,
        )
        joined.weight.copy_(torch.cat([p.weight for p in parts]))
        if first.bias is not None:
            joined.bias.copy_(torch.cat([p.bias for p in parts]))
        self.to_qkv = joined.requires_grad_(False)
        self.to_q = self.to_k = self.to_v = None


def join_qkv(module: nn.Module) -> int:
    """Join the projections of every attention in `module` (JoinableQkv); returns how many."""
    found = [m for m in module.modules() if isinstance(m, JoinableQkv)]
    for attention in found:
        attention.join_qkv()
    return len(found)
