"""T3's conditioning encoder (`cond_enc.*` of t3_cfg.safetensors): the speaker embedding
projected to one row, the reference speech tokens resampled to a fixed number of rows by a
perceiver, and the emotion exaggeration scaled onto one row."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CrossAttention(nn.Module):
    """Queries from x1, keys and values from x2, both through the same LayerNorm; residual on
    x1 (the package's AttentionBlock2, without relative position bias)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.proj_out = nn.Linear(dim, dim)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        b, n, d = x1.shape
        a, c = self.norm(x1), self.norm(x2)
        split = lambda x: x.view(b, x.shape[1], self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.to_q(a)), split(self.to_k(c)), split(self.to_v(c))
        h = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        return x1 + self.proj_out(h)


class Perceiver(nn.Module):
    """Learned queries attend to the reference speech embeddings, then to themselves (one
    attention block, used twice) → [B, queries, D]."""

    def __init__(self, queries: int, dim: int, heads: int) -> None:
        super().__init__()
        self.pre_attention_query = nn.Parameter(torch.zeros(1, queries, dim))
        self.attn = CrossAttention(dim, heads)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.pre_attention_query.expand(h.shape[0], -1, -1), h)
        return self.attn(x, x)


class CondEncoder(nn.Module):
    def __init__(self, speaker_dim: int, dim: int, queries: int, heads: int) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(speaker_dim, dim)
        self.emotion_adv_fc = nn.Linear(1, dim, bias=False)
        self.perceiver = Perceiver(queries, dim, heads)

    def forward(
        self, speaker: torch.Tensor, prompt_speech: torch.Tensor, exaggeration: torch.Tensor
    ) -> torch.Tensor:
        """speaker [B, S]; prompt_speech [B, P, D] embedded reference tokens (P may be 0);
        exaggeration [B] → the conditioning prefix [B, 1 + queries (or 0) + 1, D]:
        speaker, resampled prompt, emotion."""
        rows = [self.spkr_enc(speaker)[:, None]]
        if prompt_speech.shape[1]:
            rows.append(self.perceiver(prompt_speech))
        rows.append(self.emotion_adv_fc(exaggeration.view(-1, 1, 1).to(speaker.dtype)))
        return torch.cat(rows, dim=1)
