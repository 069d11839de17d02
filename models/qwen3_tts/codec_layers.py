"""The streaming building blocks of the 12 Hz speech tokenizer's decoder. Every block is
causal; each keeps what it needs of the past in a per-stream dict (`cache`, keyed by the
block), so that decoding a stream in chunks gives exactly the samples of decoding it at once.
A block with a past says its shape (`history_shape`, per stream), so that a stream's whole
state can live in one fixed-size row (models/qwen3_tts/codec_streams.py).

Tensors are [B, C, T] (channels first) unless a docstring says otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.layers.rope import apply_rotary

Cache = dict[int, torch.Tensor]


def _take_history(cache: Cache, key: int, x: torch.Tensor, keep: int) -> torch.Tensor:
    """x with its `keep` preceding time steps (zeros at the stream's start) prepended; stores
    the last `keep` steps of the result for the next chunk."""
    if keep == 0:
        return x
    past = cache.get(key)
    if past is None:
        past = x.new_zeros(*x.shape[:-1], keep)
    joined = torch.cat([past, x], dim=-1)
    cache[key] = joined[..., -keep:]
    return joined


class CausalConv(nn.Module):
    """A stride-1 Conv1d with all its padding on the left (the reference pads the same)."""

    def __init__(
        self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.history = (kernel - 1) * dilation

    def history_shape(self) -> tuple[int, ...] | None:
        return (self.conv.in_channels, self.history) if self.history else None

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        return self.conv(_take_history(cache, id(self), x, self.history))


class CausalTransposedConv(nn.Module):
    """ConvTranspose1d(kernel, stride) with its last kernel-stride samples cut: output block t
    depends on input frames t and (for kernel 2·stride) t-1, which the cache holds."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.history = (kernel - stride) // stride  # earlier input frames an output block reads

    def history_shape(self) -> tuple[int, ...] | None:
        return (self.conv.in_channels, self.history) if self.history else None

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        n = x.shape[-1]
        y = self.conv(_take_history(cache, id(self), x, self.history))
        start = self.history * self.stride
        return y[..., start : start + n * self.stride]


class SnakeBeta(nn.Module):
    """x + sin²(x·e^α) / e^β, per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, cache: Cache | None = None) -> torch.Tensor:
        alpha = self.alpha.exp()[None, :, None]
        beta = self.beta.exp()[None, :, None]
        return x + torch.sin(x * alpha).pow(2) / (beta + 1e-9)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        h = self.dwconv(x, cache).transpose(1, 2)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        h = self.conv1(self.act1(x), cache)
        return x + self.conv2(self.act2(h), cache)


class DecoderBlock(nn.Module):
    """Snake, an upsampling transposed conv, three dilated residual units (1, 3, 9)."""

    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            [
                SnakeBeta(c_in),
                CausalTransposedConv(c_in, c_out, 2 * rate, rate),
                *(ResidualUnit(c_out, d) for d in (1, 3, 9)),
            ]
        )

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, cache)
        return x


class SlidingAttention(nn.Module):
    """Causal self-attention over the last `window` positions (the query's own included), with
    RoPE at absolute positions; the cache keeps the last window-1 keys and values."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, window: int) -> None:
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, hidden // heads
        self.window = window
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)

    def history_shape(self) -> tuple[int, ...] | None:
        """The last window-1 keys and values, time-last: [kv heads, 2·head dim, window-1]."""
        return (self.kvh, 2 * self.d, self.window - 1) if self.window > 1 else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        starts: torch.Tensor,
        cache: Cache,
    ) -> torch.Tensor:
        """x [B, T, hidden], row b at absolute positions starts[b]..starts[b]+T-1; cos/sin
        [B·T, D] for them."""
        b, t, _ = x.shape
        q = apply_rotary(self.q_proj(x).view(b * t, self.h, self.d), cos, sin)
        k = apply_rotary(self.k_proj(x).view(b * t, self.kvh, self.d), cos, sin)
        v = self.v_proj(x).view(b, t, self.kvh, self.d)
        # Keys and values time-last [B, kvh, 2D, T], so that the history helper applies.
        kv = torch.cat([k.view(b, t, self.kvh, self.d), v], dim=-1).permute(0, 2, 3, 1)
        kv = _take_history(cache, id(self), kv, self.window - 1)
        keys, values = kv.permute(0, 3, 1, 2).split(self.d, dim=-1)  # [B, past+T, kvh, D]
        past = kv.shape[-1] - t
        q_at = (starts[:, None] + torch.arange(t, device=x.device))[:, :, None]  # [B, T, 1]
        k_at = (starts[:, None] - past + torch.arange(past + t, device=x.device))[:, None, :]
        # Causal, within the window, and never the zeros standing before the stream's start.
        mask = ((k_at <= q_at) & (k_at > q_at - self.window) & (k_at >= 0))[:, None]
        out = F.scaled_dot_product_attention(
            q.view(b, t, self.h, self.d).transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=mask,
            enable_gqa=self.h != self.kvh,
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
