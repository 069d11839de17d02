"""The shape of Step-Audio 2's DiT flow estimator (models/codecs/flow_hift/dit_estimator.py),
read from a checkpoint's config without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DitConfig:
    in_channels: int  # x + mu + speaker + cond, stacked: 4 x n_mels
    out_channels: int  # n_mels
    hidden_size: int
    depth: int
    num_heads: int
    head_dim: int
    mlp_ratio: float
    static_chunk_size: int  # mel frames per attention chunk in streaming mode
    frequency_size: int = 256  # the time embedding's sinusoids (TimestepEmbedder's default)
