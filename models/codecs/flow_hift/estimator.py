"""CosyVoice's `CausalConditionalDecoder`: the U-Net-shaped vector-field estimator of the flow
(causal conv ResNet blocks + transformer blocks, conditioned on the flow time). Parameter names
follow flow.pt's `decoder.estimator.*` (Matcha-TTS / diffusers module names)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.encoder import chunk_mask
from models.codecs.flow_hift.qkv import JoinableQkv


class CausalConv1d(nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0)))


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of [B, C, T]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class CausalBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        # Indices 0 and 2 as in the checkpoint (1 and 3 were parameterless transposes).
        self.block = nn.ModuleDict(
            {"0": CausalConv1d(dim, dim_out, 3), "2": ChannelLayerNorm(dim_out)}
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.block["2"](self.block["0"](x * mask))
        return F.mish(h) * mask


class ResnetBlock1D(nn.Module):
    """Two conv blocks with the time embedding added between; `block` is CausalBlock1D here,
    the non-causal U-Net (unet_estimator.py) passes its Block1D."""

    def __init__(
        self, dim: int, dim_out: int, time_dim: int, block: type[nn.Module] = CausalBlock1D
    ) -> None:
        super().__init__()
        self.mlp = nn.ModuleDict({"1": nn.Linear(time_dim, dim_out)})  # "0" was Mish
        self.block1 = block(dim, dim_out)
        self.block2 = block(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.block1(x, mask) + self.mlp["1"](F.mish(t))[:, :, None]
        return self.block2(h, mask) + self.res_conv(x * mask)


class Attention(JoinableQkv):
    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.h, self.d = heads, head_dim
        inner = heads * head_dim
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (p.view(b, t, self.h, self.d).transpose(1, 2) for p in self.qkv(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, None])
        return self.to_out[0](out.transpose(1, 2).reshape(b, t, self.h * self.d))


class GeluProj(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class TransformerBlock(nn.Module):
    """diffusers' BasicTransformerBlock as Matcha configures it: self-attention + GELU MLP."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = Attention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = nn.ModuleDict(
            {"net": nn.ModuleList([GeluProj(dim, 4 * dim), nn.Identity(), nn.Linear(4 * dim, dim)])}
        )

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x), bias)
        h = self.norm3(x)
        for module in self.ff["net"]:
            h = module(h)
        return x + h


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, time_dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.linear_1 = nn.Linear(dim, time_dim)
        self.linear_2 = nn.Linear(time_dim, time_dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t [B] in [0, 1] → [B, time_dim]: Matcha's sinusoids (scale 1000), then an MLP."""
        half = self.dim // 2
        freqs = torch.exp(
            torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1))
        )
        emb = 1000 * t.float()[:, None] * freqs[None, :]
        emb = torch.cat((emb.sin(), emb.cos()), dim=-1).to(self.linear_1.weight.dtype)
        return self.linear_2(F.silu(self.linear_1(emb)))


def _stage(dim_in, dim_out, time_dim, heads, head_dim, n_blocks, with_conv: bool) -> nn.ModuleList:
    parts = [
        ResnetBlock1D(dim_in, dim_out, time_dim),
        nn.ModuleList(TransformerBlock(dim_out, heads, head_dim) for _ in range(n_blocks)),
    ]
    if with_conv:
        parts.append(CausalConv1d(dim_out, dim_out, 3))
    return nn.ModuleList(parts)


class CausalConditionalDecoder(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        channels: tuple[int, ...],
        head_dim: int,
        n_blocks: int,
        num_mid_blocks: int,
        heads: int,
        chunk: int,
    ) -> None:
        super().__init__()
        if len(channels) != 1:
            raise CheckpointError(
                f"flow estimator channels {channels}: only one level (CosyVoice 2's [256]) is supported"
            )
        ch = channels[0]
        time_dim = 4 * ch
        self.chunk = chunk
        self.time_mlp = TimestepEmbedding(in_channels, time_dim)
        args = (time_dim, heads, head_dim, n_blocks)
        self.down_blocks = nn.ModuleList([_stage(in_channels, ch, *args, with_conv=True)])
        self.mid_blocks = nn.ModuleList(
            _stage(ch, ch, *args, with_conv=False) for _ in range(num_mid_blocks)
        )
        self.up_blocks = nn.ModuleList([_stage(2 * ch, ch, *args, with_conv=True)])
        self.final_block = CausalBlock1D(ch, ch)
        self.final_proj = nn.Conv1d(ch, out_channels, 1)

    def forward(self, x, mask, mu, t, spks, cond, streaming: bool, chunks=None) -> torch.Tensor:
        """x, mu, cond [B, M, T]; mask [B, 1, T]; t [B]; spks [B, M]; chunks [B, T] each
        frame's attention chunk when streaming (None: frame // chunk; encoder.chunk_ids)
        → velocity [B, M, T]."""
        temb = self.time_mlp(t)
        x = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
        valid = mask[:, 0].bool()
        grid = (self.chunk if chunks is None else chunks) if streaming else 0
        # mask_to_bias: a large negative bias rather than -inf, as the reference.
        bias = (1.0 - chunk_mask(valid, grid).to(x.dtype)) * -1.0e10
        skips = []
        for resnet, blocks, conv in self.down_blocks:
            x = self._transform(resnet(x, mask, temb), blocks, bias)
            skips.append(x)
            x = conv(x * mask)
        for resnet, blocks in self.mid_blocks:
            x = self._transform(resnet(x, mask, temb), blocks, bias)
        for resnet, blocks, conv in self.up_blocks:
            skip = skips.pop()
            x = torch.cat([x[:, :, : skip.shape[-1]], skip], dim=1)
            x = self._transform(resnet(x, mask, temb), blocks, bias)
            x = conv(x * mask)
        x = self.final_block(x, mask)
        return self.final_proj(x * mask) * mask

    def repeated_blocks(self) -> list[nn.Module]:
        """The blocks the estimator repeats (its ResNet and transformer blocks): what
        --compile-codec compiles, one program per kind (cuda_graphs.compile_regions)."""
        return [m for m in self.modules() if isinstance(m, (ResnetBlock1D, TransformerBlock))]

    @staticmethod
    def _transform(x: torch.Tensor, blocks: nn.ModuleList, bias: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)
        for block in blocks:
            h = block(h, bias)
        return h.transpose(1, 2)
