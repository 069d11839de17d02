"""Rotary position embeddings, including Llama 3's frequency scaling."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RopeSpec:
    theta: float = 10000.0
    kind: str = "default"  # "default" or "llama3"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192
    # GLM/ChatGLM: only the first `rotary_fraction` of each head's dims rotate (the rest pass
    # through), and they rotate as adjacent pairs (x0, x1), (x2, x3)… (`interleaved`) rather
    # than Llama's halves (x_i, x_{i+D/2}).
    rotary_fraction: float = 1.0
    interleaved: bool = False

    @property
    def is_llama_layout(self) -> bool:
        """Full-width, half-rotation RoPE: what the fused FlashInfer kernel path assumes."""
        return self.rotary_fraction == 1.0 and not self.interleaved

    @classmethod
    def from_hf_config(cls, cfg: dict) -> RopeSpec:
        """Both layouts: transformers 5 `rope_parameters`, and 4.x `rope_theta` + `rope_scaling`."""
        params = dict(cfg.get("rope_parameters") or {})
        if not params:
            params = dict(cfg.get("rope_scaling") or {})
            params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
        kind = params.get("rope_type", params.get("type", "default")) or "default"
        if kind not in ("default", "llama3"):
            raise ValueError(f"unsupported rope_type {kind!r} (supported: default, llama3)")
        return cls(
            theta=float(params.get("rope_theta", 10000.0)),
            kind=kind,
            factor=float(params.get("factor", 1.0)),
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_positions=int(params.get("original_max_position_embeddings", 8192)),
        )


def inverse_frequencies(spec: RopeSpec, head_dim: int) -> torch.Tensor:
    dim = int(head_dim * spec.rotary_fraction)  # the rotated dims (all of them but for GLM)
    inv = 1.0 / (spec.theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if spec.kind == "default":
        return inv
    # Llama 3: long wavelengths are slowed by `factor`, short ones kept, a smooth blend between.
    low_wavelen = spec.original_max_positions / spec.low_freq_factor
    high_wavelen = spec.original_max_positions / spec.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / spec.factor, inv)
    smooth = (spec.original_max_positions / wavelen - spec.low_freq_factor) / (
        spec.high_freq_factor - spec.low_freq_factor
    )
    blended = (1 - smooth) * scaled / spec.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


class Rotary(torch.nn.Module):
    def __init__(self, spec: RopeSpec, head_dim: int) -> None:
        super().__init__()
        self.interleaved = spec.interleaved
        self.register_buffer("inv_freq", inverse_frequencies(spec, head_dim), persistent=False)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [T, R] for the R rotated dims (R = D unless the spec rotates a fraction)."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, R/2]
        if self.interleaved:  # pair i is dims (2i, 2i+1): each frequency twice, side by side
            emb = freqs.repeat_interleave(2, dim=-1)  # [T, R]
        else:
            emb = torch.cat((freqs, freqs), dim=-1)  # [T, R]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """x: [T, H, D]; cos/sin: [T, R], R <= D: the first R dims rotate, the rest pass through.
    Default: the half-rotation layout HF Llama checkpoints use; `interleaved`: adjacent pairs
    (ChatGLM / GLM-4)."""
    rot = cos.shape[-1]
    if rot < x.shape[-1]:
        head, tail = x[..., :rot], x[..., rot:]
        return torch.cat((apply_rotary(head, cos, sin, interleaved), tail), dim=-1)
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((-odd, even), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
