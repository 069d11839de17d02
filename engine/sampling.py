"""Batched sampling with per-request parameters and per-request seeded generators.

Works on the model's candidate columns (models.base.Candidates): the whole vocabulary for
most models, or the few thousand tokens valid at each row's position for constrained ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.request import SamplingParams
from models.base import Candidates


@dataclass
class SamplingBatch:
    """One row per request that samples this step."""

    params: list[SamplingParams]
    generators: list[torch.Generator | None]  # None: the engine's shared generator
    context_ids: list[list[int]]  # tokens the repetition penalty looks at (prompt + output)


def _seen_mask(cands: Candidates, batch: SamplingBatch, rows: list[int]) -> torch.Tensor:
    logits = cands.logits
    seen = torch.zeros_like(logits, dtype=torch.bool)
    for i in rows:
        ids = torch.tensor(batch.context_ids[i], dtype=torch.long, device=logits.device)
        if cands.token_ids is None:
            seen[i, ids] = True
        else:
            seen[i] = torch.isin(cands.token_ids[i], ids)
    return seen


def apply_repetition_penalty(cands: Candidates, batch: SamplingBatch) -> torch.Tensor:
    """HF/CTRL rule: a seen token's logit is divided by the penalty if positive, else multiplied."""
    logits = cands.logits
    rows = [i for i, p in enumerate(batch.params) if p.repetition_penalty != 1.0]
    if not rows:
        return logits
    seen = _seen_mask(cands, batch, rows)
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


def sample(cands: Candidates, batch: SamplingBatch, default_gen: torch.Generator | None) -> list[int]:
    """One token per row."""
    logits = apply_repetition_penalty(cands, batch)
    columns = logits.argmax(dim=-1)
    stochastic = [i for i, p in enumerate(batch.params) if not p.greedy]
    if stochastic:
        device = logits.device
        rows = torch.tensor(stochastic, device=device)
        temp = torch.tensor([batch.params[i].temperature for i in stochastic], device=device)
        top_k = torch.tensor([batch.params[i].top_k for i in stochastic], device=device)
        top_p = torch.tensor([batch.params[i].top_p for i in stochastic], device=device)
        probs = _top_k_top_p(logits[rows] / temp[:, None], top_k, top_p).softmax(dim=-1)
        # Exponential race: argmax(p / E), E ~ Exp(1), draws from p. Each row's noise comes from
        # its own generator, so a seeded request samples the same tokens whatever else shares
        # its batch.
        noise = torch.empty_like(probs)
        for j, i in enumerate(stochastic):
            noise[j].exponential_(generator=batch.generators[i] or default_gen)
        columns[rows] = (probs / noise).argmax(dim=-1)
    if cands.token_ids is not None:
        columns = cands.token_ids.gather(1, columns[:, None])[:, 0]
    return columns.tolist()
