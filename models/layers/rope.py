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
    inv = 1.0 / (spec.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
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
        self.register_buffer("inv_freq", inverse_frequencies(spec, head_dim), persistent=False)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, H, D]; cos/sin: [T, D]. The half-rotation layout HF Llama checkpoints use."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
