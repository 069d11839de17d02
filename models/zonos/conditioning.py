"""Zonos' prefix conditioner (parameter names as published: `prefix_conditioner.…`).

The prefix is one position per phoneme, then one per other conditioner (speaker, emotion,
fmax, pitch_std, speaking_rate, language_id), each projected to d_model by its own rule, then
all through one linear projection and a LayerNorm. Both are per position, so a position's
embedding depends on its row alone (rows.py); the unconditional prefix of classifier-free
guidance replaces every conditioner but the phonemes by its learned vector.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.checkpoint_errors import CheckpointError
from models.zonos.phonemes import VOCAB_SIZE


class PhonemeConditioner(nn.Module):
    def __init__(self, d_model: int, spec: dict) -> None:
        super().__init__()
        self.name = spec["name"]
        self.phoneme_embedder = nn.Embedding(VOCAB_SIZE, d_model)


class ValueConditioner(nn.Module):
    """One prefix position from a request's value (or the learned unconditional vector)."""

    def __init__(self, d_model: int, spec: dict) -> None:
        super().__init__()
        self.name, self.kind = spec["name"], spec["type"]
        if spec.get("uncond_type") != "learned":
            raise CheckpointError(f"conditioner {self.name}: Voxgate needs a learned uncond vector")
        self.uncond_vector = nn.Parameter(torch.zeros(d_model))
        self.lo, self.hi = spec.get("min_val", 0), spec.get("max_val", 1)
        if self.kind == "PassthroughConditioner":
            self.width = int(spec.get("cond_dim") or d_model)
            if spec.get("projection") == "linear":
                self.project = nn.Linear(self.width, d_model)
            elif spec.get("projection", "none") == "none":
                self.project = nn.Identity()
            else:
                raise CheckpointError(f"conditioner {self.name}: unsupported projection")
        elif self.kind == "FourierConditioner":
            self.width = int(spec.get("input_dim", 1))
            self.register_buffer(
                "weight", torch.randn(d_model // 2, self.width) * spec.get("std", 1.0)
            )
        elif self.kind == "IntegerConditioner":
            self.width = 1
            self.int_embedder = nn.Embedding(self.hi - self.lo + 1, d_model)
        else:
            raise CheckpointError(f"conditioner type {self.kind!r} is not one Zonos v0.1 uses")

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        """values [T, width] float32 → [T, d_model]."""
        x = values[:, : self.width]
        if self.kind == "PassthroughConditioner":
            return self.project(x.to(self.uncond_vector.dtype))
        if self.kind == "FourierConditioner":
            x = (x - self.lo) / (self.hi - self.lo)
            f = 2 * math.pi * x.to(self.weight.dtype) @ self.weight.T
            return torch.cat([f.cos(), f.sin()], dim=-1)
        index = (x[:, 0].round().long() - self.lo).clamp(0, self.hi - self.lo)
        return self.int_embedder(index)


class PrefixConditioner(nn.Module):
    def __init__(self, d_model: int, specs: tuple[dict, ...]) -> None:
        super().__init__()
        if not specs or specs[0]["type"] != "EspeakPhonemeConditioner":
            raise CheckpointError("config.json: Zonos' first conditioner must be the phonemes")
        self.conditioners = nn.ModuleList(
            [PhonemeConditioner(d_model, specs[0])]
            + [ValueConditioner(d_model, s) for s in specs[1:]]
        )
        self.project = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.conditioners]

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.project(x))

    def phonemes(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] → prefix embeddings [T, d_model]."""
        return self.finish(self.conditioners[0].phoneme_embedder(ids))

    def values(
        self, index: torch.Tensor, given: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of conditioner positions: index [T] (1.. into `conditioners`), given [T] bool,
        values [T, MAX_VALUES] float32 → (conditional, unconditional) embeddings [T, d_model]
        each, every conditioner evaluated on every row and the row's own one selected (fixed
        shapes; a prompt has six such rows)."""
        cond = uncond = None
        for j, c in enumerate(self.conditioners[1:], start=1):
            mine = (index == j)[:, None]
            learned = c.uncond_vector.expand(index.shape[0], -1)
            out = torch.where(given[:, None], c(values), learned)
            cond = torch.where(mine, out, cond) if cond is not None else out * mine
            uncond = torch.where(mine, learned, uncond) if uncond is not None else learned * mine
        return self.finish(cond), self.finish(uncond)
