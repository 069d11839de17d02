"""Zonos' sampling rules on its 9 codebooks' logits (zonos/model.py, zonos/sampling.py):
classifier-free guidance (uncond + (cond - uncond) x scale, published scale 2), codebooks
1..8 never draw EOS, a repetition penalty of 3 over each codebook's last 2 frames of the
delayed grid (CTRL form: positive logits divided, others multiplied, once per occurrence),
then min-p 0.1 (tokens below 0.1 x the top token's probability are dropped).

Temperature and the draw are the engine's (the published temperature is 1). Min-p is applied
here at temperature 1, which is the published rule at the published temperature; a request
with another temperature gets min-p measured before its temperature, not after.
"""

from __future__ import annotations

import math

import torch

from models.zonos.config import EOS_CODE, HEAD_ROWS

CFG_SCALE = 2.0
REPETITION_PENALTY = 3.0
REPETITION_WINDOW = 2  # frames of the delayed grid: the input row and the one before it
MIN_P = 0.1


def guided(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    return uncond + (cond - uncond) * scale


def forbid_late_eos(logits: torch.Tensor) -> torch.Tensor:
    """logits [N, 9, V]: only codebook 0 may draw EOS (in place)."""
    logits[:, 1:, EOS_CODE] = float("-inf")
    return logits


def penalise_recent(logits: torch.Tensor, recent: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [N, 9, V] float32; recent [N, 9, W] the codes of the last W frames per codebook
    (negative or >= V: none) → penalised logits."""
    valid = (recent >= 0) & (recent < HEAD_ROWS)
    counts = torch.zeros_like(logits)
    counts.scatter_add_(2, recent.clamp(0, HEAD_ROWS - 1), valid.to(logits.dtype))
    factors = torch.pow(torch.full_like(logits, penalty), counts)
    return torch.where(logits <= 0, logits * factors, logits / factors)


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop (to -inf) tokens whose probability at temperature 1 is below min_p x the top one's:
    in logits, those below the row's max + ln(min_p)."""
    if min_p <= 0.0:
        return logits
    top = logits.max(dim=-1, keepdim=True).values
    return logits.masked_fill(logits < top + math.log(min_p), float("-inf"))
