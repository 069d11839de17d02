"""CosyVoice 1's `BlockConformerEncoder` as GLM-4-Voice's decoder uses it: token embeddings →
a linear embedding → conformer layers whose relative-position attention is block-causal (a
token sees every token up to the end of its `block_size` block) → a final layer norm. No
subsampling, no upsampling, no look-ahead convolution (CosyVoice 2's UpsampleConformerEncoder
has those). Macaron feed-forward and the convolution module exist in the reference class but
are switched off in THUDM/glm-4-voice-decoder's config.yaml; they are built only when the
config asks for them. Parameter names follow flow.pt's `encoder.*`.

Block-causality is what makes streaming possible: the encoding of tokens up to a block
boundary does not change when later tokens arrive."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.flow_hift.encoder import (
    FeedForward,
    LinearEmbed,
    RelPositionAttention,
    chunk_mask,
    rel_position_table,
)


class ConvolutionModule(nn.Module):
    """Conformer convolution: pointwise conv → GLU → depthwise conv (non-causal) → BatchNorm →
    SiLU → pointwise conv. Padded frames are zeroed before each convolution."""

    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise_conv = nn.Conv1d(dim, dim, kernel, padding=(kernel - 1) // 2, groups=dim)
        self.norm = nn.BatchNorm1d(dim)
        self.pointwise_conv2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """x [B, T, D], present [B, T, 1] (1 for real frames) → [B, T, D]."""
        h = (x * present).transpose(1, 2)
        h = F.glu(self.pointwise_conv1(h), dim=1)
        h = self.depthwise_conv(h * present.transpose(1, 2))
        h = self.pointwise_conv2(F.silu(self.norm(h)))
        return h.transpose(1, 2) * present


class BlockConformerLayer(nn.Module):
    """Pre-norm conformer layer: [½ macaron FF] → attention → [conv module] → FF (½ with
    macaron) → [final norm]; LayerNorm eps 1e-5 as CosyVoice 1's ConformerEncoderLayer."""

    def __init__(self, dim: int, heads: int, hidden: int, macaron: bool, conv_kernel: int) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.norm_ff = nn.LayerNorm(dim, eps=1e-5)
        self.norm_mha = nn.LayerNorm(dim, eps=1e-5)
        self.macaron = macaron
        if macaron:
            self.feed_forward_macaron = FeedForward(dim, hidden)
            self.norm_ff_macaron = nn.LayerNorm(dim, eps=1e-5)
        self.use_conv = conv_kernel > 0
        if self.use_conv:
            self.conv_module = ConvolutionModule(dim, conv_kernel)
            self.norm_conv = nn.LayerNorm(dim, eps=1e-5)
            self.norm_final = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x, mask, pos, present) -> torch.Tensor:
        ff_scale = 0.5 if self.macaron else 1.0
        if self.macaron:
            x = x + ff_scale * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn(self.norm_mha(x), mask, pos)
        if self.use_conv:
            x = x + self.conv_module(self.norm_conv(x), present)
        x = x + ff_scale * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x) if self.use_conv else x


class BlockConformerEncoder(nn.Module):
    def __init__(
        self,
        input_size: int,
        dim: int,
        heads: int,
        hidden: int,
        num_blocks: int,
        block_size: int,
        macaron: bool = False,
        conv_kernel: int = 0,
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.embed = LinearEmbed(input_size, dim)
        self.encoders = nn.ModuleList(
            BlockConformerLayer(dim, heads, hidden, macaron, conv_kernel) for _ in range(num_blocks)
        )
        self.after_norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x [B, T, input_size] token embeddings (zeros past each row's length), lengths [B]
        → [B, T, D]. Query i attends to valid keys j < (i // block_size + 1) * block_size."""
        t = x.shape[1]
        valid = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        present = valid[..., None].to(x.dtype)
        x = self.embed(x)
        mask = chunk_mask(valid, self.block_size)
        pos = rel_position_table(t, x.shape[2], x.device, x.dtype)
        for layer in self.encoders:
            x = layer(x, mask, pos, present)
        return self.after_norm(x)
