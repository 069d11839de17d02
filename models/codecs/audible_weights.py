"""Random weights for a convolutional audio decoder whose audio follows its codes, for tiny
presets, `--random-weights` and tests.

Initialisers made for training leave a deep decoder deaf: transformers' DAC draws its convs at
std 0.02, so each of its ~30 layers shrinks the signal ~5-fold, and the audio is a bias-made
hum whatever the codes (two unrelated code sequences decode within 0.1 % of each other; a test
of streaming seams or of which codes reached the decoder then cannot fail). Here every
convolution passes its input on at about its own scale (weights N(0, 1/fan-in), biases small
and non-zero so a mix-up of them shows), and the last convolution is scaled so the decoder's
output, for seeded random codes, spreads by `output_std`: loud enough to hear the codes, not
so loud that a final tanh or clamp flattens it."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

BIAS_STD = 0.1


@torch.no_grad()
def unit_gain_convs(module: nn.Module, generator: torch.Generator) -> None:
    """Every Conv1d / ConvTranspose1d in `module` redrawn at unit gain."""
    for conv in module.modules():
        if not isinstance(conv, nn.Conv1d | nn.ConvTranspose1d):
            continue
        w = conv.weight
        if isinstance(conv, nn.ConvTranspose1d):  # [in, out / groups, k]: each output sums
            fan_in = w.shape[0] * w.shape[2] / conv.stride[0]  # in · k / stride inputs
        else:
            fan_in = w.shape[1] * w.shape[2]
        w.copy_(torch.randn(w.shape, generator=generator) / math.sqrt(fan_in))
        if conv.bias is not None:
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=generator) * BIAS_STD)


def output_spread(
    layer: nn.Module,
    probe: Callable[[], object],
    part: Callable[[torch.Tensor], torch.Tensor] = lambda out: out,
) -> float:
    """The standard deviation of `part` of `layer`'s output the first time `probe()` (a run of
    the decoder) calls it."""
    seen: list[float] = []
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(float(part(out).std())))
    try:
        with torch.no_grad():
            probe()
    finally:
        hook.remove()
    return seen[0]


@torch.no_grad()
def scale_output(last: nn.Module, probe: Callable[[], object], output_std: float) -> None:
    """Scale `last` (a plain convolution, the decoder's final layer) so that its output spreads
    by `output_std` when `probe()` runs the decoder."""
    factor = output_std / output_spread(last, probe)
    last.weight.mul_(factor)
    if last.bias is not None:
        last.bias.mul_(factor)
