"""Seeded random weights for a model's real shapes (`--random-weights`: benchmarks without the
download): the families' builders draw their backbones through `randomise`."""

from __future__ import annotations

import torch


@torch.no_grad()
def randomise(*modules: torch.nn.Module, std: float = 0.02) -> None:
    """Every norm's weight 1, every other parameter N(0, std), from torch's generator (the
    caller seeds it): activations keep their scale through a deep stack."""
    for module in modules:
        for name, param in module.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, std)
