"""Random flow + HiFT weights for the tiny presets, `--random-weights` and tests: HiFT's made
audible (its audio follows the mel), a flow's biases and norms moved off their defaults.

HiFT's convolutions are weight-normed: each output channel's filter is `g · v / |v|`. torch's
default init leaves |filter| ≈ 0.58, which shrinks the mel's path ~1e4-fold over HiFT's dozen
layers, while the sine excitation (from the predicted F0) enters near the output: the audio is
then the excitation's, whatever the mel says (two unrelated token sequences decode within 1 %
of each other), and a test of streaming seams or of which tokens reached the decoder cannot
fail. At |filter| = 1 each layer passes its input on at about its own scale and the audio
follows the mel; at 1.4 the resblocks blow up. The last convolution's output is the
spectrogram's log-magnitude (exponentiated): its filters are scaled so that, for a mel of unit
spread, it spreads by LOG_MAGNITUDE_STD, so the audio neither clips nor fades into the
excitation whatever HiFT's widths and source variant."""

from __future__ import annotations

import torch

from models.codecs.audible_weights import output_spread
from models.codecs.flow_hift.hift import HiFTGenerator

FILTER_NORM = 1.0
LOG_MAGNITUDE_STD = 0.5
PROBE_FRAMES = 64


@torch.no_grad()
def make_audible(hift: HiFTGenerator) -> HiFTGenerator:
    """Set the filter norms above (before `fold_weight_norm`); returns `hift`. On the meta
    device (shapes only) the norms are set and nothing is probed."""
    norms = [
        (name, p)
        for name, p in hift.named_parameters()
        if name.endswith("parametrizations.weight.original0")
    ]
    if not norms:
        raise ValueError("make_audible needs HiFT's weight-norm parametrizations: call it first")
    for _, p in norms:
        p.fill_(FILTER_NORM)
    if not norms[0][1].is_meta:
        post = hift.conv_post.parametrizations.weight.original0
        post.mul_(LOG_MAGNITUDE_STD / _log_magnitude_spread(hift))
    return hift


def _log_magnitude_spread(hift: HiFTGenerator) -> float:
    """The spread of HiFT's log-magnitude output for a seeded mel of unit spread."""
    device = hift.conv_pre.parametrizations.weight.original0.device
    mel = torch.randn(
        1, hift.cfg.in_channels, PROBE_FRAMES, generator=torch.Generator().manual_seed(0)
    ).to(device)
    phase0 = torch.zeros(1, hift.cfg.nb_harmonics + 1, dtype=torch.float64, device=device)
    start = torch.zeros(1, dtype=torch.long, device=device)
    bins = hift.cfg.n_fft // 2 + 1
    return output_spread(
        hift.conv_post, lambda: hift(mel, phase0, start), part=lambda out: out[:, :bins]
    )


@torch.no_grad()
def nudge_off_defaults(flow: torch.nn.Module, scale: float = 0.1) -> None:
    """A flow's norms, biases and relative-position biases moved off their init values (ones,
    zeros), so a loader that mixed one up or dropped it would show (global RNG)."""
    for name, p in flow.named_parameters():
        if "pos_bias" in name or name.endswith("bias") or "norm" in name:
            p.add_(scale * torch.randn_like(p))
