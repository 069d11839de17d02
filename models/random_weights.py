"""Seeded random weights for a model's real shapes (`--random-weights`: benchmarks without the
download): the families' builders draw their backbones through `randomise`."""

from __future__ import annotations

from collections.abc import Sequence

import torch


@torch.no_grad()
def randomise(
    *modules: torch.nn.Module,
    std: float = 0.02,
    zero_biases: bool = False,
    norm_names: Sequence[str] = ("norm",),
) -> None:
    """Every norm's parameter 1 (a name that contains one of `norm_names`), with `zero_biases`
    every other bias 0, and every other parameter N(0, std), from torch's generator (the caller
    seeds it), in the modules' parameter order: activations keep their scale through a deep
    stack."""
    for module in modules:
        for name, param in module.named_parameters():
            if any(norm in name for norm in norm_names):
                param.fill_(1.0)
            elif zero_biases and name.endswith("bias"):
                param.zero_()
            else:
                param.normal_(0.0, std)
