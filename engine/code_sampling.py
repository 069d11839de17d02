"""The sampler a model's depth stage draws its codebooks with (models.base.CodeSampler).

A depth stage (CSM, Moshi) draws codebooks 1..K-1 of every request one after the other, each
step's codes feeding the next step. Everything per request (temperature, top-k, top-p, seed,
frame index) is uploaded once per engine step; each draw is then a fixed sequence of device
kernels over the whole batch — greedy and sampling rows alike, selected with `where` — so the
K-1 draws need no host synchronisation and have one shape each (capturable in a CUDA graph).

Randomness is `race_noise` (engine/sampling.py) keyed by (seed mixed with the codebook index,
frame index, code): a seeded request draws the same codes whatever shares its batch. No
repetition penalty applies to depth codes (neither Sesame's reference nor transformers' CSM
uses one there); the engine's Sampler still applies it to codebook 0.
"""

from __future__ import annotations

import torch

from engine.sampling import SamplingRow, race_noise, top_k_top_p
from models.device_util import upload

_M32 = 0xFFFFFFFF
_CODEBOOK_SALT = 0x632BE5AB  # odd: distinct codebooks give distinct seeds


class DeviceCodeSampler:
    """models.base.CodeSampler for one engine step's sampling rows."""

    def __init__(self, rows: list[SamplingRow], seeds: list[int], device: torch.device) -> None:
        greedy = [r.params.greedy for r in rows]
        self.any_random = not all(greedy)
        if not self.any_random:
            return
        self.greedy = upload(greedy, torch.bool, device)
        # Greedy rows take the argmax; a harmless temperature lets one expression serve all rows.
        self.temperature = upload(
            [1.0 if r.params.greedy else r.params.temperature for r in rows], torch.float32, device
        )
        self.top_k = upload([r.params.top_k for r in rows], torch.long, device)
        self.top_p = upload([r.params.top_p for r in rows], torch.float32, device)
        drawn = [r.params for r in rows if not r.params.greedy]
        self.nucleus = any(p.top_p < 1.0 for p in drawn)
        self.max_k = max(p.top_k for p in drawn)
        self.seeds = upload(seeds, torch.long, device)
        self.steps = upload([r.step for r in rows], torch.long, device)

    def __call__(self, logits: torch.Tensor, index: int) -> torch.Tensor:
        """logits [N, V] float32 (column = code) → one code per row [N] int64."""
        best = logits.argmax(dim=-1)
        if not self.any_random:
            return best
        scaled = logits / self.temperature[:, None]
        probs = top_k_top_p(scaled, self.top_k, self.top_p, self.nucleus, self.max_k).softmax(-1)
        codes = torch.arange(logits.shape[1], device=logits.device).expand_as(logits)
        seeds = (self.seeds ^ (index * _CODEBOOK_SALT)) & _M32
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p.
        drawn = (probs / race_noise(seeds, self.steps, codes)).argmax(dim=-1)
        return torch.where(self.greedy, best, drawn)
