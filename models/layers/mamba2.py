"""Mamba2's mixer in plain PyTorch, correct on the CPU and on any GPU (no mamba-ssm kernels).

Parameter names and shapes are mamba-ssm's `Mamba2` (the layout published checkpoints such as
Zyphra/Zonos-v0.1-hybrid hold): `in_proj` (d_model → z, xBC, dt), `conv1d` (depthwise, causal,
kernel d_conv, with bias), `dt_bias`, `A_log`, `D` (one per head), `norm` (RMSNorm gated by z,
one group per B/C group, the gate applied before the norm) and `out_proj`. The whole inner
width goes through the SSM (mamba-ssm's `d_ssm` unset), as in transformers' `Mamba2Mixer`.

Two ways through it, with the state explicit in both:
- `sequence`: a prompt (or a chunk of one) for a few rows at once: the causal conv over the
  stored conv state and the new inputs, then the SSD recurrence as a chunked scan (quadratic
  within a chunk, one state hand-over between chunks), starting from the stored SSM state.
- `step`: one token for each of many rows: the conv window shifted by one and the one-token
  state update h ← exp(dt·A)·h + dt·B·x, y = C·h + D·x.
A row's state is `conv` [conv_dim, d_conv - 1] (the last inputs of the conv, in the model's
dtype) and `ssm` [heads, headdim, d_state] (float32, the dtype the recurrence runs in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError

# mamba-ssm's Mamba2 keyword arguments Voxgate reads (with its defaults) and those it refuses
# to guess (a checkpoint that sets them needs code this module does not have).
_DEFAULTS = {
    "d_state": 128,
    "d_conv": 4,
    "expand": 2,
    "headdim": 64,
    "ngroups": 1,
    "chunk_size": 256,
}
_FIXED = {
    "d_ssm": None,
    "rmsnorm": True,
    "norm_before_gate": False,
    "D_has_hdim": False,
    "bias": False,
    "conv_bias": True,
    "dt_limit": (0.0, float("inf")),
}
_INIT_ONLY = ("dt_min", "dt_max", "dt_init_floor", "A_init_range", "conv_init", "layer")


@dataclass(frozen=True)
class Mamba2Sizes:
    d_model: int
    d_state: int = 128
    d_conv: int = 4
    expand: int = 2
    headdim: int = 64
    ngroups: int = 1
    chunk_size: int = 256
    norm_eps: float = 1e-5  # mamba-ssm's RMSNormGated default

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def nheads(self) -> int:
        return self.d_inner // self.headdim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.ngroups * self.d_state

    @classmethod
    def from_ssm_cfg(cls, d_model: int, cfg: dict) -> Mamba2Sizes:
        """mamba-ssm's `ssm_cfg` (config.json) → sizes, with mamba-ssm's defaults."""
        if cfg.get("layer", "Mamba2") != "Mamba2":
            raise CheckpointError(f"ssm_cfg layer {cfg.get('layer')!r}: Voxgate has Mamba2 only")
        for key, value in cfg.items():
            if key in _FIXED and _as_tuple(value) != _as_tuple(_FIXED[key]):
                raise CheckpointError(
                    f"ssm_cfg {key}={value!r}: Voxgate's Mamba2 supports only {_FIXED[key]!r}"
                )
            if key not in _FIXED and key not in _DEFAULTS and key not in _INIT_ONLY:
                raise CheckpointError(f"ssm_cfg has {key!r}, which Voxgate's Mamba2 does not read")
        sizes = cls(d_model, **{k: int(cfg.get(k, v)) for k, v in _DEFAULTS.items()})
        if sizes.d_inner % sizes.headdim or sizes.nheads % sizes.ngroups:
            raise CheckpointError(
                f"ssm_cfg: expand x d_model ({sizes.d_inner}) must split into heads of "
                f"{sizes.headdim}, and the heads into {sizes.ngroups} groups"
            )
        return sizes

    def to_ssm_cfg(self) -> dict:
        """The ssm_cfg mamba-ssm reads back to these sizes (only what differs from its
        defaults, as published checkpoints write it)."""
        cfg: dict = {"layer": "Mamba2"}
        for key, default in _DEFAULTS.items():
            if getattr(self, key) != default:
                cfg[key] = getattr(self, key)
        return cfg


def _as_tuple(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


class GatedRMSNorm(nn.Module):
    """RMSNorm of y · silu(z) per group of `group` channels (mamba-ssm's RMSNormGated with
    norm_before_gate=False), in float32."""

    def __init__(self, width: int, group: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.group, self.eps = group, eps

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x = y.float() * F.silu(z.float())
        grouped = x.unflatten(-1, (-1, self.group))
        grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * grouped.flatten(-2)).to(y.dtype)


class Mamba2Mixer(nn.Module):
    def __init__(self, s: Mamba2Sizes) -> None:
        super().__init__()
        self.s = s
        self.in_proj = nn.Linear(s.d_model, s.d_inner + s.conv_dim + s.nheads, bias=False)
        self.conv1d = nn.Conv1d(
            s.conv_dim, s.conv_dim, s.d_conv, groups=s.conv_dim, padding=s.d_conv - 1, bias=True
        )
        # mamba-ssm's initialisation: A in [1, 16], dt in [0.001, 0.1] (dt_bias its inverse
        # softplus), D one. Loading a checkpoint overwrites all three.
        self.A_log = nn.Parameter(torch.log(torch.empty(s.nheads).uniform_(1, 16)))
        dt = torch.exp(torch.rand(s.nheads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        dt = dt.clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.D = nn.Parameter(torch.ones(s.nheads))
        self.norm = GatedRMSNorm(s.d_inner, s.d_inner // s.ngroups, s.norm_eps)
        self.out_proj = nn.Linear(s.d_inner, s.d_model, bias=False)

    # -- shared pieces ---------------------------------------------------------------------------
    def _split(self, x: torch.Tensor):
        s = self.s
        return self.in_proj(x).split([s.d_inner, s.conv_dim, s.nheads], dim=-1)

    def _dt(self, dt: torch.Tensor) -> torch.Tensor:
        return F.softplus(dt.float() + self.dt_bias.float())

    def _ssm_inputs(self, xbc: torch.Tensor):
        """Conv output [..., conv_dim] → x [..., heads, headdim], B and C [..., heads, d_state]
        (each group's B and C repeated for its heads), all float32."""
        s = self.s
        x, b, c = xbc.float().split([s.d_inner, s.ngroups * s.d_state, s.ngroups * s.d_state], -1)
        per_group = s.nheads // s.ngroups
        b = b.unflatten(-1, (s.ngroups, s.d_state)).repeat_interleave(per_group, dim=-2)
        c = c.unflatten(-1, (s.ngroups, s.d_state)).repeat_interleave(per_group, dim=-2)
        return x.unflatten(-1, (s.nheads, s.headdim)), b, c

    def _finish(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = y + self.D.float()[:, None] * x  # [..., heads, headdim]
        return self.out_proj(self.norm(y.flatten(-2).to(z.dtype), z))

    # -- a sequence ------------------------------------------------------------------------------
    def sequence(
        self, hidden: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """hidden [B, T, d_model] after the rows' stored states conv [B, conv_dim, d_conv - 1]
        and ssm [B, heads, headdim, d_state] (zeros for a fresh row) → (out [B, T, d_model],
        the new conv state, the new ssm state)."""
        z, xbc, dt = self._split(hidden)
        window = torch.cat([conv.to(xbc.dtype), xbc.transpose(1, 2)], dim=-1)
        new_conv = window[..., window.shape[-1] - (self.s.d_conv - 1) :]
        w = self.conv1d
        xbc = F.silu(F.conv1d(window, w.weight, w.bias, groups=self.s.conv_dim)).transpose(1, 2)
        x, b, c = self._ssm_inputs(xbc)
        a = -torch.exp(self.A_log.float())
        y, new_ssm = chunked_scan(x, self._dt(dt), a, b, c, ssm, self.s.chunk_size)
        return self._finish(y, x, z), new_conv.to(conv.dtype), new_ssm.to(ssm.dtype)

    # -- one token per row -----------------------------------------------------------------------
    def step(
        self, hidden: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """hidden [B, d_model], one token per row, with the rows' states → (out [B, d_model],
        new conv state, new ssm state)."""
        z, xbc, dt = self._split(hidden)
        window = torch.cat([conv.to(xbc.dtype), xbc[:, :, None]], dim=-1)  # [B, conv_dim, K]
        w = self.conv1d
        xbc = F.silu((window * w.weight[:, 0]).sum(-1) + w.bias)
        x, b, c = self._ssm_inputs(xbc)  # x [B, H, P], b and c [B, H, N]
        dt = self._dt(dt)  # [B, H]
        decay = torch.exp(dt * -torch.exp(self.A_log.float()))
        new_ssm = (
            ssm.float() * decay[..., None, None]
            + (dt[..., None] * x)[..., None] * (b[:, :, None, :])
        )
        y = (new_ssm @ c[..., None])[..., 0]  # [B, H, P]
        return self._finish(y, x, z), window[..., 1:].to(conv.dtype), new_ssm.to(ssm.dtype)


def chunked_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    state: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The SSD recurrence h_t = exp(dt_t·a)·h_{t-1} + dt_t·x_t⊗B_t, y_t = h_t·C_t over a
    sequence, chunk by chunk: within a chunk as one masked (attention-like) product, between
    chunks by handing the state over. x [B, T, H, P], dt [B, T, H], a [H], b and c
    [B, T, H, N], state [B, H, P, N] (the state before the first token) → (y [B, T, H, P],
    the state after the last token). All float32."""
    t = x.shape[1]
    state = state.float()
    ys = []
    for start in range(0, t, chunk):
        sl = slice(start, min(start + chunk, t))
        xs, bs, cs = x[:, sl], b[:, sl], c[:, sl]
        da = dt[:, sl] * a  # [B, L, H], each ≤ 0
        cum = da.cumsum(1)
        # decay[l, s] = exp(sum of da over s+1..l) for s ≤ l (0 above the diagonal)
        diff = cum[:, :, None, :] - cum[:, None, :, :]  # [B, L, L, H]
        n = xs.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        decay = torch.exp(diff.masked_fill(~causal[None, :, :, None], float("-inf")))
        scores = torch.einsum("blhn,bshn->blsh", cs, bs) * decay
        dx = xs * dt[:, sl, :, None]  # [B, L, H, P]
        y = torch.einsum("blsh,bshp->blhp", scores, dx)
        # what the state entering the chunk adds: C_l · (exp(cum_l) · h)
        y = y + torch.einsum("blhn,bhpn->blhp", cs, state) * torch.exp(cum)[..., None]
        ys.append(y)
        # the state leaving the chunk
        to_end = torch.exp(cum[:, -1:, :] - cum)  # [B, L, H]
        state = state * torch.exp(cum[:, -1, :])[..., None, None] + torch.einsum(
            "blhn,blhp->bhpn", bs * to_end[..., None], dx
        )
    return torch.cat(ys, dim=1), state
