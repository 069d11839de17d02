"""T3's sampling rules, in the order T3.inference applies them to each step's speech logits:
classifier-free guidance, repetition penalty (over every speech token so far, the start token
included), temperature, min-p, top-p, then a draw (or the argmax: greedy)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.chatterbox.config import SAMPLING


@dataclass(frozen=True)
class T3Sampling:
    temperature: float = SAMPLING.temperature
    top_p: float = SAMPLING.top_p
    min_p: float = SAMPLING.min_p
    repetition_penalty: float = SAMPLING.repetition_penalty
    cfg_weight: float = SAMPLING.cfg_weight
    greedy: bool = False

    def __post_init__(self) -> None:
        checks = (
            ("temperature", self.temperature > 0),
            ("top_p", 0 < self.top_p <= 1),
            ("min_p", 0 <= self.min_p <= 1),
            ("repetition_penalty", self.repetition_penalty > 0),
            ("cfg_weight", self.cfg_weight >= 0),
        )
        for name, ok in checks:
            if not ok:
                raise ValueError(f"invalid Chatterbox sampling option {name}={getattr(self, name)}")


def guided(cond: torch.Tensor, uncond: torch.Tensor, weight: float | torch.Tensor) -> torch.Tensor:
    """cond + w (cond - uncond); `weight` a number, or [N, 1] one per row."""
    return cond + weight * (cond - uncond)


def penalise_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' RepetitionPenaltyLogitsProcessor: a seen token's logit is divided by the
    penalty when positive, multiplied when negative. seen [N, V] bool."""
    if penalty == 1.0:
        return logits
    scaled = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, scaled, logits)


def keep_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Tokens less probable than min_p times the likeliest are removed (the likeliest stays)."""
    if min_p <= 0:
        return logits
    probs = logits.softmax(dim=-1)
    floor = min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < floor, float("-inf"))


def keep_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of likeliest tokens whose probability reaches top_p (at least one)."""
    if top_p >= 1.0:
        return logits
    ascending, order = logits.sort(dim=-1)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - top_p
    drop[..., -1] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def next_speech_token(
    cond: torch.Tensor,
    uncond: torch.Tensor,
    seen: torch.Tensor,
    rules: T3Sampling,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """cond, uncond [N, V] float32 speech logits of the two CFG rows; seen [N, V] → [N]."""
    logits = guided(cond, uncond, rules.cfg_weight)
    logits = penalise_repeats(logits, seen, rules.repetition_penalty)
    if rules.greedy:
        return logits.argmax(dim=-1)
    logits = keep_min_p(logits / rules.temperature, rules.min_p)
    logits = keep_top_p(logits, rules.top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]
