"""Zonos' own `generate` rules (github.com/Zyphra/Zonos: zonos/model.py, zonos/sampling.py,
zonos/codebook_pattern.py), written out for the per-request baseline (zonos_baseline.py) so
that it runs where the `zonos` package is not installed.

- The delayed grid: `audio_frames` frames of 9 codes are laid out as 9 + audio_frames grid
  frames, codebook k shifted k + 1 frames right; frame 0 is all mask, codebook k is mask in
  frames 0..k and in the 8 - k frames after its last code, and UNKNOWN (to draw) elsewhere.
- A frame's draw fills its UNKNOWN places in order (`masked_scatter_`): where a frame's
  first codebooks are mask (the grid's last 8 frames), the drawn codes land one codebook or
  more further on than the codebook they were drawn for, as the package does.
- Sampling (`sample_from_logits` with generate's defaults: min-p 0.1, repetition penalty 3
  over the last 2 grid frames): the penalty (CTRL form, once per occurrence), then the
  temperature's softmax, top-p, top-k and min-p (each renormalised), and the draw as
  argmax(p / q) with q ~ Exp(1); temperature 0 takes the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.zonos.config import CODEBOOK_SIZE, EOS_CODE, HEAD_ROWS, MASK_CODE, N_CODEBOOKS

UNKNOWN = -1
# The package's heads are padded to 1026 rows (a multiple of 8 is asked; 1025 % 8 = 1 row is
# added) and every row past EOS is -inf: the mask's penalty lands on that row, never on EOS.
LOGIT_ROWS = HEAD_ROWS + 1
MIN_P = 0.1
REPETITION_PENALTY = 3.0
REPETITION_WINDOW = 2


@dataclass(frozen=True)
class ZonosSampling:
    """One request's draw. top_p 0 and top_k 0: off, as in the package."""

    temperature: float = 1.0
    top_p: float = 0.0
    top_k: int = 0
    min_p: float = MIN_P


def delayed_grid(audio_frames: int, device: torch.device) -> torch.Tensor:
    """[9, audio_frames + 9] of UNKNOWN and MASK_CODE, as generate() starts it."""
    grid = torch.full((N_CODEBOOKS, audio_frames + N_CODEBOOKS), MASK_CODE, device=device)
    for k in range(N_CODEBOOKS):
        grid[k, k + 1 : k + 1 + audio_frames] = UNKNOWN
    return grid


def fill_frame(grid: torch.Tensor, frame: int, codes: torch.Tensor) -> None:
    """Write a draw `codes` [9] into grid frame `frame`, in order into its UNKNOWN places."""
    column = grid[:, frame]
    column.masked_scatter_(column == UNKNOWN, codes)


def audio_codes(grid: torch.Tensor, frames: int) -> torch.Tensor:
    """The audio frames of the first `frames` grid frames, the delay undone → [9, n]: those
    whole (codebook 8 written) before codebook 0's EOS, codes past the codec's (EOS, mask)
    as 0, as generate() returns them."""
    capacity = grid.shape[1] - N_CODEBOOKS
    n = max(0, min(capacity, frames - N_CODEBOOKS + 1))
    ended = (grid[0, 1 : n + 1] == EOS_CODE).nonzero()
    if len(ended):
        n = int(ended[0])
    codes = torch.stack([grid[k, k + 1 : k + 1 + n] for k in range(N_CODEBOOKS)])
    return codes.masked_fill(codes >= CODEBOOK_SIZE, 0)


def penalise(logits: torch.Tensor, recent: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [9, LOGIT_ROWS], recent [9, W] grid codes → each logit divided (positive) or
    multiplied (otherwise) by penalty ** (its code's count in its codebook's window)."""
    index = recent.clamp_max(logits.shape[-1] - 1).long()
    factors = torch.ones_like(logits).scatter_reduce(
        1, index, torch.full(index.shape, penalty, dtype=logits.dtype, device=logits.device), "prod"
    )
    return torch.where(logits <= 0, logits * factors, logits / factors)


def draw(
    logits: torch.Tensor,
    recent: torch.Tensor | None,
    rule: ZonosSampling,
    generator: torch.Generator,
) -> torch.Tensor:
    """logits [9, LOGIT_ROWS] float32 → one code per codebook [9]. `recent`: the grid's last
    frames (None: the first draw, which the package takes without the penalty)."""
    if recent is not None:
        logits = penalise(logits, recent[:, -REPETITION_WINDOW:], REPETITION_PENALTY)
    if rule.temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / rule.temperature, dim=-1)
    if rule.top_p > 0.0:
        ranked, order = probs.sort(dim=-1, descending=True)
        ranked = ranked * ((ranked.cumsum(-1) - ranked) <= rule.top_p)
        probs = _normalised(torch.zeros_like(probs).scatter(-1, order, ranked))
    if rule.top_k > 0:
        kth = probs.topk(min(rule.top_k, probs.shape[-1]), dim=-1).values[:, -1:]
        probs = _normalised(probs.masked_fill(probs < kth, 0.0))
    if rule.min_p > 0.0:
        top = probs.max(dim=-1, keepdim=True).values
        probs = _normalised(probs.masked_fill(probs < rule.min_p * top, 0.0))
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / q).argmax(dim=-1)


def _normalised(probs: torch.Tensor) -> torch.Tensor:
    return probs / probs.sum(dim=-1, keepdim=True)
