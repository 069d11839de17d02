"""Deterministic noise for SNAC's decoder: PositionalNoise replaces snac's NoiseBlock so that the
noise at a sample is a pure function of (stream seed, block, absolute position). That is what lets
a streamed window equal the whole decode where they overlap (models/codecs/snac.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from snac import SNAC
from snac.layers import DecoderBlock, NoiseBlock
from torch import nn

_M32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**27, so (uint32 * _MIX) never overflows int64


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (xorshift-multiply) on int64 tensors holding uint32 values."""
    x = ((x >> 16) ^ x) * _MIX & _M32
    x = ((x >> 16) ^ x) * _MIX & _M32
    return (x >> 16) ^ x


def positional_normal(
    seed: torch.Tensor, salt: int, start: torch.Tensor, length: int
) -> torch.Tensor:
    """Standard-normal noise that is a pure function of (seed, salt, absolute position); salt
    tells the decoder's noise blocks apart. seed, start: [B] int64; returns [B, length] float32
    for positions start .. start+length-1."""
    pos = start[:, None] + torch.arange(length, device=start.device)  # [B, length]
    stream_key = _hash32((_hash32(seed[:, None] & _M32) + salt) & _M32)  # [B, 1]
    key = _hash32(stream_key ^ (pos & _M32))  # distinct per position within a 2**32 period
    u1 = ((_hash32(key ^ 0x68E31DA4) >> 8).float() + 0.5) * 2.0**-24  # in (0, 1)
    u2 = (_hash32(key ^ 0x1B56C4E9) >> 8).float() * 2.0**-24
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)  # Box-Muller


@dataclass
class NoiseContext:
    """Per-call input to every PositionalNoise of one model: where each batch row starts in its
    stream and which seed it uses. SNAC.decode takes only codes, so it travels beside the call;
    None means offset 0 and seed 0 (a whole-utterance decode)."""

    latent_offset: torch.Tensor | None = None  # [B] int64, latent steps before the window
    seed: torch.Tensor | None = None  # [B] int64

    def rows(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, dtype=torch.int64, device=device)
        offset = zeros if self.latent_offset is None else self.latent_offset.to(device)
        seed = zeros if self.seed is None else self.seed.to(device)
        return offset, seed


class PositionalNoise(nn.Module):
    """Drop-in for snac's NoiseBlock (x + N(0,1) · linear(x)) whose noise is a function of the
    absolute sample position in the stream instead of torch.randn. Why: with randn every decode
    differs, so a streamed window could never equal the whole decode and tests could not pin the
    output. Keeping noise (rather than switching it off) keeps the decoder on the distribution it
    was trained with; positional noise keeps the same N(0,1) statistics, is reproducible per
    stream seed, and is identical wherever a window overlaps the whole decode."""

    def __init__(self, linear: nn.Module, salt: int, samples_per_latent: int, ctx: NoiseContext):
        super().__init__()
        self.linear = linear  # the original weight-normed conv: state-dict names are unchanged
        self.salt = salt
        self.samples_per_latent = samples_per_latent  # time steps per latent step at this block
        self.ctx = ctx

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, T]
        offset, seed = self.ctx.rows(x.shape[0], x.device)
        noise = positional_normal(seed, self.salt, offset * self.samples_per_latent, x.shape[-1])
        return x + noise[:, None, :].to(x.dtype) * self.linear(x)


def install_positional_noise(model: SNAC) -> NoiseContext:
    """Swap every decoder NoiseBlock for PositionalNoise (idempotent); return the shared context."""
    for module in model.decoder.modules():
        if isinstance(module, PositionalNoise):
            return module.ctx
    ctx = NoiseContext()
    upsampling = 1
    blocks = [layer for layer in model.decoder.model if isinstance(layer, DecoderBlock)]
    for index, block in enumerate(blocks):
        upsampling *= block.block[1].stride[0]  # block = [Snake1d, ConvTranspose1d, NoiseBlock?, …]
        for i, sub in enumerate(block.block):
            if isinstance(sub, NoiseBlock):
                block.block[i] = PositionalNoise(sub.linear, index, upsampling, ctx)
    return ctx
