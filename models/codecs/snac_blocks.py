"""SNAC's decoder blocks made ready for regional compilation (engine/cuda_graphs.py,
compile_regions): what `--compile-codec` compiles for Orpheus.

SNAC spends most of a window's time outside its convolutions' arithmetic: every residual unit
runs two Snake activations (x + sin²(αx)/α, five elementwise kernels each in eager torch, each
a full pass over a [rows, channels, samples] activation) around a depthwise and a pointwise
conv, then a residual add. Inductor fuses each Snake into one pass. The `snac` package writes
Snake as a TorchScript function, which torch.compile cannot trace in one graph, so the
decoder's Snake modules are swapped for the same arithmetic in plain torch (bitwise the same
result in eager mode), sharing their α parameter, so state-dict names do not change."""

from __future__ import annotations

import torch
from snac import SNAC
from snac.layers import ResidualUnit, Snake1d
from torch import nn


class PlainSnake(nn.Module):
    """snac's Snake1d in plain torch: x + (α + 1e-9)⁻¹ · sin²(α x), α per channel."""

    def __init__(self, alpha: nn.Parameter) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(shape[0], shape[1], -1)
        x = x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)
        return x.reshape(shape)


def plain_snakes(model: SNAC) -> None:
    """Swap every Snake1d of the decoder for a PlainSnake sharing its α (idempotent)."""
    for parent in model.decoder.modules():
        for name, child in parent.named_children():
            if isinstance(child, Snake1d):
                setattr(parent, name, PlainSnake(child.alpha))


def residual_units(model: SNAC) -> list[nn.Module]:
    """The decoder's residual units (three per upsampling block): the blocks it repeats, one
    compiled program for all of them (their weights are its inputs)."""
    return [m for m in model.decoder.modules() if isinstance(m, ResidualUnit)]
