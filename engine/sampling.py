"""Batched sampling with per-request parameters and per-request seeded generators."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.request import SamplingParams


@dataclass
class SamplingBatch:
    """One row per request that samples this step."""

    params: list[SamplingParams]
    generators: list[torch.Generator | None]  # None: the engine's shared generator
    context_ids: list[list[int]]  # tokens the repetition penalty looks at (prompt + output)


def apply_repetition_penalty(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """HF/CTRL rule: a seen token's logit is divided by the penalty if positive, else multiplied."""
    rows = [i for i, p in enumerate(batch.params) if p.repetition_penalty != 1.0]
    if not rows:
        return logits
    seen = torch.zeros_like(logits, dtype=torch.bool)
    for i in rows:
        ids = torch.tensor(batch.context_ids[i], dtype=torch.long, device=logits.device)
        seen[i, ids] = True
    penalty = torch.tensor(
        [p.repetition_penalty for p in batch.params], dtype=logits.dtype, device=logits.device
    )[:, None]
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) everything outside each row's top-k and top-p nucleus."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, logits.shape[-1])[:, None]
    drop = ranks >= k
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass strictly above each token
    drop |= before > top_p[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def sample(logits: torch.Tensor, batch: SamplingBatch, default_gen: torch.Generator | None) -> list[int]:
    """logits [N, V] float32 (already constrained by the model) → one token per row."""
    logits = apply_repetition_penalty(logits, batch)
    greedy_ids = logits.argmax(dim=-1)
    stochastic = [i for i, p in enumerate(batch.params) if not p.greedy]
    if not stochastic:
        return greedy_ids.tolist()
    rows = torch.tensor(stochastic, device=logits.device)
    sub = logits[rows]
    temp = torch.tensor([batch.params[i].temperature for i in stochastic], device=logits.device)
    top_k = torch.tensor([batch.params[i].top_k for i in stochastic], device=logits.device)
    top_p = torch.tensor([batch.params[i].top_p for i in stochastic], device=logits.device)
    sub = _top_k_top_p(sub / temp[:, None], top_k, top_p)
    probs = sub.softmax(dim=-1)
    # Exponential race (Gumbel-max in another guise): argmax(p / E) with E ~ Exp(1) draws from
    # p. Each row's noise comes from its own generator, so a seeded request samples the same
    # tokens whatever else shares its batch.
    noise = torch.empty_like(probs)
    for j, i in enumerate(stochastic):
        gen = batch.generators[i] or default_gen
        noise[j].exponential_(generator=gen)
    chosen = (probs / noise).argmax(dim=-1)
    result = greedy_ids.clone()
    result[rows] = chosen
    return result.tolist()
