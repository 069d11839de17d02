"""A stateless reference for Zonos' hybrid backbone, for the parity tests.

The official hybrid (Zyphra/Zonos@bc40d98, zonos/backbone/_mamba_ssm.py) cannot run on the CPU:
it builds its blocks with mamba-ssm's `create_block` and its final norm with mamba-ssm's Triton
`layer_norm_fn`, and its pure-PyTorch backbone (`_torch.py`) serves the transformer only. So the
reference is the same math from independent parts: transformers' `Mamba2Mixer` (its PyTorch
path) for each Mamba2 layer, given that layer's weights, and plain causal attention with
half-rotation rotary (mamba-ssm's MHA default) for the attention layers; every step recomputes
the whole sequence from its rows, so no state is carried at all. Greedy grids come from the
model's own embedding, heads and sampling rules around it (those are checked against the
official transformer in test_zonos_parity.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.zonos.hybrid import HybridBackbone


def _hf_mixer(ours) -> nn.Module:
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    s = ours.s
    config = Mamba2Config(
        hidden_size=s.d_model,
        num_heads=s.nheads,
        head_dim=s.headdim,
        state_size=s.d_state,
        expand=s.expand,
        n_groups=s.ngroups,
        conv_kernel=s.d_conv,
        use_bias=False,
        use_conv_bias=True,
        chunk_size=s.chunk_size,
        layer_norm_epsilon=s.norm_eps,
        num_hidden_layers=1,
    )
    mixer = Mamba2Mixer(config, layer_idx=0)
    mixer.load_state_dict(ours.state_dict(), strict=True)
    return mixer.eval()


def _rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D], half-rotation rotary over whole heads, theta 10000."""
    d = x.shape[-1]
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = positions.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


class ReferenceHybrid(nn.Module):
    """Stands in for a HybridBackbone (same call signature; ignores the paged KV and the state
    pool): the whole sequence each call."""

    def __init__(self, ours: HybridBackbone) -> None:
        super().__init__()
        self.ours = ours
        self.mixers = {i: _hf_mixer(layer.mixer) for i, layer in enumerate(ours.layers)
                       if i not in ours.attention}  # fmt: skip

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn=None, pool=None):
        h = x.transpose(0, 1)  # [2 CFG rows, T, d_model]
        for i, layer in enumerate(self.ours.layers):
            if i in self.mixers:
                h = h + self.mixers[i](layer.norm(h))
            else:
                h = h + self._attention(layer, layer.norm(h), positions)
                h = h + layer.mlp(layer.norm2(h))
        return self.ours.norm_f(h).transpose(0, 1)

    @staticmethod
    def _attention(layer, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        m, (b, t, _) = layer.mixer, h.shape
        q, k, v = m.in_proj(h).split([m.h * m.d, m.kvh * m.d, m.kvh * m.d], dim=-1)
        q = _rotate(q.view(b, t, m.h, m.d), positions).transpose(1, 2)
        k = _rotate(k.view(b, t, m.kvh, m.d), positions).transpose(1, 2)
        v = v.view(b, t, m.kvh, m.d).transpose(1, 2)
        k = k.repeat_interleave(m.h // m.kvh, dim=1)
        v = v.repeat_interleave(m.h // m.kvh, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return m.out_proj(out.transpose(1, 2).reshape(b, t, m.h * m.d))


@torch.inference_mode()
def reference_greedy_grid(model, prompt: list, frames: int) -> list[tuple[int, ...]]:
    """The rows a greedy request gets, each step's backbone run over the whole sequence."""
    reference = ReferenceHybrid(model.weights.backbone)
    ours = model.weights.backbone
    model.weights.backbone = reference
    try:
        output: list[tuple[int, ...]] = []
        for _ in range(frames):
            ids = torch.tensor(list(prompt) + output)
            hidden = model.forward(ids, torch.arange(len(ids)), None)[-1:]
            codes = model.ruled_logits(hidden).argmax(-1)[0].tolist()
            row = model.follow_row(prompt, output, tuple(codes))
            output.append(row)
            if model.is_stop(row):
                break
        return output
    finally:
        model.weights.backbone = ours
