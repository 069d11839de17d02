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

from dataclasses import dataclass

import torch

from engine.sampling import SamplingRow, race_noise, top_k_top_p
from models.device_util import upload

_M32 = 0xFFFFFFFF
_CODEBOOK_SALT = 0x632BE5AB  # odd: distinct codebooks give distinct seeds
# Codebook draws whose noise one pass computes. The hash is ~17 elementwise kernels whatever
# the tensor's size, so one pass over 8 draws' [N, V] costs about what one draw's did: on a
# CPU, where a small op is mostly dispatch, that is ~1.5 ms of voxgate-tiny's 7-draw stage.
NOISE_BLOCK = 8


@dataclass
class CodeSamplingInputs:
    """One step's per-row sampling settings on the device ([N] each). Greedy rows carry a
    harmless temperature of 1 so that one expression serves every row."""

    greedy: torch.Tensor  # bool
    temperature: torch.Tensor  # float32
    top_k: torch.Tensor  # int64, <= 0: no top-k
    top_p: torch.Tensor  # float32
    seeds: torch.Tensor  # int64
    steps: torch.Tensor  # int64: the frame index of each row (keys the noise)

    @classmethod
    def upload(
        cls, rows: list[SamplingRow], seeds: list[int], device: torch.device
    ) -> CodeSamplingInputs:
        return cls(
            upload([r.params.greedy for r in rows], torch.bool, device),
            upload(
                [1.0 if r.params.greedy else r.params.temperature for r in rows],
                torch.float32,
                device,
            ),
            upload([r.params.top_k for r in rows], torch.long, device),
            upload([r.params.top_p for r in rows], torch.float32, device),
            upload(seeds, torch.long, device),
            upload([r.step for r in rows], torch.long, device),
        )


@dataclass(frozen=True)
class CodeSamplingPlan:
    """What the host knows about a step's rows, which picks the kernels a draw runs."""

    any_random: bool  # False: every row greedy, a draw is one argmax
    nucleus: bool  # some drawn row has top_p < 1: the full sort
    max_k: int  # the largest top-k of the drawn rows (without a nucleus: a top-k threshold)

    @classmethod
    def of(cls, rows: list[SamplingRow]) -> CodeSamplingPlan:
        drawn = [r.params for r in rows if not r.params.greedy]
        return cls(
            any_random=bool(drawn),
            nucleus=any(p.top_p < 1.0 for p in drawn),
            max_k=max((p.top_k for p in drawn), default=0),
        )


class DeviceCodeSampler:
    """models.base.CodeSampler for one engine step's sampling rows."""

    def __init__(self, inputs: CodeSamplingInputs | None, plan: CodeSamplingPlan) -> None:
        self.inputs, self.plan = inputs, plan
        self._noise_of: dict[int, torch.Tensor] = {}  # codebook index → its noise [N, V]

    @classmethod
    def for_rows(
        cls, rows: list[SamplingRow], seeds: list[int], device: torch.device
    ) -> DeviceCodeSampler:
        plan = CodeSamplingPlan.of(rows)
        return cls(
            CodeSamplingInputs.upload(rows, seeds, device) if plan.any_random else None, plan
        )

    def __call__(self, logits: torch.Tensor, index: int) -> torch.Tensor:
        """logits [N, V] float32 (column = code) → one code per row [N] int64."""
        best = logits.argmax(dim=-1)
        x, plan = self.inputs, self.plan
        if not plan.any_random or x is None:
            return best
        scaled = logits / x.temperature[:, None]
        probs = top_k_top_p(scaled, x.top_k, x.top_p, plan.nucleus, plan.max_k).softmax(-1)
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p.
        drawn = (probs / self._noise(index, logits.shape[1])).argmax(dim=-1)
        return torch.where(x.greedy, best, drawn)

    def _noise(self, index: int, vocab: int) -> torch.Tensor:
        """Exp(1) noise [N, V] of codebook `index`, keyed by (seed mixed with the index, frame,
        code); computed with that of the next NOISE_BLOCK - 1 codebooks in one pass (the same
        values as one pass each: the hash is elementwise)."""
        if index not in self._noise_of:
            x = self.inputs
            assert x is not None
            n = x.seeds.shape[0]
            indices = torch.arange(index, index + NOISE_BLOCK, device=x.seeds.device)
            seeds = (x.seeds[None, :] ^ (indices[:, None] * _CODEBOOK_SALT)) & _M32  # [S, N]
            codes = torch.arange(vocab, device=x.seeds.device).expand(NOISE_BLOCK * n, vocab)
            noise = race_noise(seeds.flatten(), x.steps.repeat(NOISE_BLOCK), codes)
            for i, block in enumerate(noise.view(NOISE_BLOCK, n, vocab).unbind(0)):
                self._noise_of[index + i] = block
        return self._noise_of[index]
