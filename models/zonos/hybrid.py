"""Zonos v0.1 hybrid's backbone (Zyphra/Zonos-v0.1-hybrid): mamba-ssm's blocks, attention at
`attn_layer_idx` (as in the transformer: LayerNorm, GQA with rotary, gated SiLU MLP, on the
engine's paged KV) and Mamba2 everywhere else (LayerNorm then the mixer, no MLP). Parameter
names as published: `backbone.layers.{i}.norm`, `.mixer.{in_proj, conv1d, dt_bias, A_log, D,
norm, out_proj}` for a Mamba2 layer, the transformer's names for an attention layer,
`backbone.norm_f`.

Both classifier-free-guidance rows of a request run together, as in the transformer: tokens
are [T, 2, d_model]. A Mamba2 layer's state is per request and per CFG row, in the model's
RecurrentStatePool (models/recurrent_state.py): [2, conv_dim, d_conv - 1] and
[2, heads, headdim, d_state] per layer. A step's single tokens (decodes) go through the mixer's
one-token update together; a prefill chunk goes through its chunked scan on its own, starting
from its request's state.
"""

from __future__ import annotations

import torch
from torch import nn

from models.layers.mamba2 import Mamba2Mixer, Mamba2Sizes
from models.layers.rope import RopeSpec, Rotary
from models.recurrent_state import RecurrentStatePool, StateSpec, StepSlots
from models.zonos.backbone import Block, attention_block
from models.zonos.config import BackboneSizes

CFG_ROWS = 2


class MambaBlock(nn.Module):
    def __init__(self, s: BackboneSizes, ssm: Mamba2Sizes) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(s.d_model, eps=s.norm_eps)
        self.mixer = Mamba2Mixer(ssm)


def state_specs(ssm: Mamba2Sizes, dtype: torch.dtype) -> tuple[StateSpec, StateSpec]:
    """One request's state in one Mamba2 layer: the conv window (model dtype) and the SSM
    state (float32), for both CFG rows."""
    return (
        StateSpec((CFG_ROWS, ssm.conv_dim, ssm.d_conv - 1), dtype),
        StateSpec((CFG_ROWS, ssm.nheads, ssm.headdim, ssm.d_state), torch.float32),
    )


class HybridBackbone(nn.Module):
    def __init__(self, s: BackboneSizes) -> None:
        super().__init__()
        assert s.ssm is not None and s.attn_layers is not None
        self.sizes = s
        self.attention = {i: j for j, i in enumerate(s.attention_layers)}  # layer → KV layer
        self.layers = nn.ModuleList(
            Block(s) if i in self.attention else MambaBlock(s, s.ssm) for i in range(s.n_layer)
        )
        mamba_layers = [i for i in range(s.n_layer) if i not in self.attention]
        self.mamba = {i: j for j, i in enumerate(mamba_layers)}  # layer → the pool's layer
        self.norm_f = nn.LayerNorm(s.d_model, eps=s.norm_eps)
        self.rotary = Rotary(RopeSpec(theta=10000.0, interleaved=s.rotary_interleaved), s.head_dim)

    def new_state_pool(self, device: torch.device, dtype: torch.dtype) -> RecurrentStatePool:
        assert self.sizes.ssm is not None
        return RecurrentStatePool(len(self.mamba), state_specs(self.sizes.ssm, dtype), device)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, attn, pool: RecurrentStatePool
    ) -> torch.Tensor:
        """x [T, 2, d_model] at positions [T], the step's requests' tokens packed in the order
        `pool.begin_step` was given → hidden [T, 2, d_model] after the final norm."""
        step = pool.step
        if step is None:
            raise RuntimeError("the hybrid backbone runs only after pool.begin_step")
        cos, sin = self.rotary.cos_sin(positions, torch.float32)
        interleaved = self.sizes.rotary_interleaved
        for i, layer in enumerate(self.layers):
            if i in self.attention:
                x = attention_block(layer, x, cos, sin, attn, self.attention[i], interleaved)
            else:
                x = x + mamba_layer(layer.mixer, layer.norm(x), pool, self.mamba[i], step)
        return self.norm_f(x)


def mamba_layer(
    mixer: Mamba2Mixer, h: torch.Tensor, pool: RecurrentStatePool, layer: int, step: StepSlots
) -> torch.Tensor:
    """One Mamba2 mixer over the step's packed tokens h [T, 2, d_model], reading and writing
    the requests' states in `pool` → [T, 2, d_model]."""
    out = torch.empty_like(h)
    if step.single_rows.numel():
        rows, slots = step.single_rows, step.single_slots
        conv, ssm = pool.read(layer, slots, step.single_fresh)  # [S, 2, ...] each
        tokens = h.index_select(0, rows).flatten(0, 1)  # [S · 2, d_model]
        y, conv, ssm = mixer.step(tokens, conv.flatten(0, 1), ssm.flatten(0, 1))
        out.index_copy_(0, rows, y.unflatten(0, (-1, CFG_ROWS)))
        per_request = (conv.unflatten(0, (-1, CFG_ROWS)), ssm.unflatten(0, (-1, CFG_ROWS)))
        pool.write(layer, slots, per_request)
    for seg in step.longer:
        conv, ssm = pool.read_one(layer, seg)  # [2, ...] each
        tokens = h[seg.start : seg.start + seg.length].transpose(0, 1)  # [2, L, d_model]
        y, conv, ssm = mixer.sequence(tokens, conv, ssm)
        out[seg.start : seg.start + seg.length] = y.transpose(0, 1)
        pool.write_one(layer, seg, (conv, ssm))
    return out
