"""Zonos' transformer backbone on the engine's paged KV cache (parameter names as published:
`backbone.layers.{i}.norm / mixer.in_proj / mixer.out_proj / norm2 / mlp.fc1 / mlp.fc2`,
`backbone.norm_f`): pre-LayerNorm blocks, grouped-query attention with interleaved rotary
embeddings over whole heads (theta 10000), and a gated SiLU MLP whose fc1 yields the value
half first, then the gate.

Classifier-free guidance: a request's conditional and unconditional rows have the same length
and positions (the prefixes differ only in the conditioner vectors), so both run as one
sequence with their heads stacked, as Chatterbox's T3 does (models/chatterbox/guided.py): the
cache holds 2 x kv heads, query head i of the 2 x heads reads kv head i // (heads / kv_heads).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.layers.rope import RopeSpec, Rotary, apply_rotary
from models.zonos.config import BackboneSizes


class Mixer(nn.Module):
    def __init__(self, s: BackboneSizes) -> None:
        super().__init__()
        self.h, self.kvh, self.d = s.num_heads, s.num_kv_heads, s.head_dim
        self.in_proj = nn.Linear(s.d_model, (self.h + 2 * self.kvh) * self.d, bias=False)
        self.out_proj = nn.Linear(self.h * self.d, s.d_model, bias=False)


class Mlp(nn.Module):
    def __init__(self, s: BackboneSizes) -> None:
        super().__init__()
        self.fc1 = nn.Linear(s.d_model, 2 * s.mlp_hidden, bias=False)
        self.fc2 = nn.Linear(s.mlp_hidden, s.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * F.silu(gate))


class Block(nn.Module):
    def __init__(self, s: BackboneSizes) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(s.d_model, eps=s.norm_eps)
        self.mixer = Mixer(s)
        self.norm2 = nn.LayerNorm(s.d_model, eps=s.norm_eps)
        self.mlp = Mlp(s)


class ZonosBackbone(nn.Module):
    def __init__(self, s: BackboneSizes) -> None:
        super().__init__()
        self.sizes = s
        self.layers = nn.ModuleList(Block(s) for _ in range(s.n_layer))
        self.norm_f = nn.LayerNorm(s.d_model, eps=s.norm_eps)
        self.rotary = Rotary(RopeSpec(theta=10000.0, interleaved=True), s.head_dim)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """x [T, 2, d_model] (each token's conditional and unconditional embeddings) at
        positions [T] → hidden [T, 2, d_model] after the final norm."""
        cos, sin = self.rotary.cos_sin(positions, torch.float32)
        for i, layer in enumerate(self.layers):
            x = attention_block(layer, x, cos, sin, attn, i, interleaved=True)
        return self.norm_f(x)


def attention_block(
    layer: Block, x: torch.Tensor, cos, sin, attn, kv_layer: int, interleaved: bool
) -> torch.Tensor:
    """One pre-LayerNorm attention + MLP block over x [T, 2, d_model]; `kv_layer` is the
    block's layer in the paged KV cache."""
    t, m = x.shape[0], layer.mixer
    q, k, v = m.in_proj(layer.norm(x)).split([m.h * m.d, m.kvh * m.d, m.kvh * m.d], dim=-1)
    # Rotary in float32, as the reference computes it, then back to the cache dtype.
    q = apply_rotary(q.reshape(t, 2 * m.h, m.d).float(), cos, sin, interleaved).to(x.dtype)
    k = apply_rotary(k.reshape(t, 2 * m.kvh, m.d).float(), cos, sin, interleaved).to(x.dtype)
    out = attn.forward(kv_layer, q, k, v.reshape(t, 2 * m.kvh, m.d))
    x = x + m.out_proj(out.reshape(t, 2, m.h * m.d))
    return x + layer.mlp(layer.norm2(x))
