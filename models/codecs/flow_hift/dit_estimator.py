"""Step-Audio 2's flow estimator: a DiT (`cosyvoice2.flow.decoder_dit.DiT` in StepFun's
Step-Audio2 code) in place of CosyVoice 2's U-Net. The stacked input (x, mu, speaker, cond:
4 x 80 channels) is projected to `hidden_size`, then `depth` blocks each apply, modulated by
the flow time through adaLN (shift, scale and gate per branch): self-attention (biased q/k/v,
LayerNorm on each head's q and k, no positional encoding), a causal conv block (conv3 →
LayerNorm → Mish → conv3) and a tanh-GELU MLP; a modulated final norm and a linear layer give
the velocity. Parameter names follow flow.pt's `decoder.estimator.*`.

Attention: the reference's whole-utterance forward attends over every valid frame; its
streaming path (`forward_chunk`, key/value caches) lets each chunk attend to itself and every
cached frame before it, which is chunk-causal attention over the row: `streaming=True` here.
The convolutions are causal in both, so padding after a row's frames never reaches them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.flow_hift.dit_config import DitConfig
from models.codecs.flow_hift.encoder import chunk_mask
from models.codecs.flow_hift.qkv import JoinableQkv


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


def plain_norm(dim: int) -> nn.LayerNorm:
    """The blocks' parameterless LayerNorm (adaLN supplies scale and shift)."""
    return nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)


class TimeEmbedding(nn.Module):
    """t [B] in [0, 1] → [B, hidden]: sinusoids of 1000 t (cosines first), then an MLP."""

    def __init__(self, hidden: int, frequency_size: int) -> None:
        super().__init__()
        self.frequency_size = frequency_size
        self.mlp = nn.ModuleDict(
            {"0": nn.Linear(frequency_size, hidden), "2": nn.Linear(hidden, hidden)}
        )

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.frequency_size // 2
        freqs = torch.exp(
            -math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half
        )
        args = 1000 * t.float()[:, None] * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(self.mlp["0"].weight.dtype)
        return self.mlp["2"](F.silu(self.mlp["0"](emb)))


class DitAttention(JoinableQkv):
    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.h, self.d = heads, head_dim
        inner = heads * head_dim
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.q_norm = nn.LayerNorm(head_dim)
        self.k_norm = nn.LayerNorm(head_dim)
        self.proj = nn.Linear(inner, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, D]; bias [B, T, T] added to the scores (large negative: masked)."""
        b, t, _ = x.shape
        q, k, v = (p.view(b, t, self.h, self.d).transpose(1, 2) for p in self.qkv(x))
        out = F.scaled_dot_product_attention(
            self.q_norm(q), self.k_norm(k), v, attn_mask=bias[:, None]
        )
        return self.proj(out.transpose(1, 2).reshape(b, t, self.h * self.d))


class CausalConv(nn.Conv1d):
    """A causal conv over [B, T, C] (time second, as the block's sequence layout)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.pad(x.transpose(1, 2), (self.kernel_size[0] - 1, 0))
        return super().forward(h).transpose(1, 2)


class ConvBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        # Indices 1, 3 and 6 as in the checkpoint (the others were transposes and Mish).
        self.block = nn.ModuleDict(
            {"1": CausalConv(dim, dim, 3), "3": nn.LayerNorm(dim), "6": CausalConv(dim, dim, 3)}
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block["6"](F.mish(self.block["3"](self.block["1"](x))))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class DitBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = plain_norm(dim), plain_norm(dim), plain_norm(dim)
        self.attn = DitAttention(dim, heads, head_dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.conv = ConvBlock(dim)
        self.adaLN_modulation = nn.ModuleDict({"1": nn.Linear(dim, 9 * dim)})  # "0" was SiLU

    def forward(self, x: torch.Tensor, c: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, D], c [B, 1, D] (the time embedding), bias [B, T, T]."""
        mods = self.adaLN_modulation["1"](F.silu(c)).chunk(9, dim=-1)
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m, shift_c, scale_c, gate_c = mods
        x = x + gate_a * self.attn(modulate(self.norm1(x), shift_a, scale_a), bias)
        x = x + gate_c * self.conv(modulate(self.norm3(x), shift_c, scale_c))
        return x + gate_m * self.mlp(modulate(self.norm2(x), shift_m, scale_m))


class FinalLayer(nn.Module):
    def __init__(self, dim: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = plain_norm(dim)
        self.linear = nn.Linear(dim, out_channels)
        self.adaLN_modulation = nn.ModuleDict({"1": nn.Linear(dim, 2 * dim)})

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation["1"](F.silu(c)).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DitEstimator(nn.Module):
    def __init__(self, cfg: DitConfig) -> None:
        super().__init__()
        self.chunk = cfg.static_chunk_size
        dim = cfg.hidden_size
        self.t_embedder = TimeEmbedding(dim, cfg.frequency_size)
        self.in_proj = nn.Linear(cfg.in_channels, dim)
        self.blocks = nn.ModuleList(
            DitBlock(dim, cfg.num_heads, cfg.head_dim, cfg.mlp_ratio) for _ in range(cfg.depth)
        )
        self.final_layer = FinalLayer(dim, cfg.out_channels)

    def forward(self, x, mask, mu, t, spks, cond, streaming: bool, chunks=None) -> torch.Tensor:
        """x, mu, cond [B, M, T]; mask [B, 1, T]; t [B]; spks [B, M]; chunks [B, T] each
        frame's attention chunk when streaming (None: frame // chunk; encoder.chunk_ids)
        → velocity [B, M, T] (the caller keeps the valid frames)."""
        c = self.t_embedder(t)[:, None]
        h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
        h = self.in_proj(h.transpose(1, 2))
        valid = mask[:, 0].bool()
        grid = (self.chunk if chunks is None else chunks) if streaming else 0
        # A large negative bias rather than -inf: a padding row with no valid frame stays finite.
        bias = (1.0 - chunk_mask(valid, grid).to(h.dtype)) * -1.0e10
        for block in self.blocks:
            h = block(h, c, bias)
        return self.final_layer(h, c).transpose(1, 2)

    def repeated_blocks(self) -> list[nn.Module]:
        """The blocks the estimator repeats: what --compile-codec compiles
        (cuda_graphs.compile_regions)."""
        return list(self.blocks)
