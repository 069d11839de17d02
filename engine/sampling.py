"""Batched sampling with per-request parameters, all on the device in a fixed number of kernels.

Works on the model's candidate columns (models.base.Candidates): the whole vocabulary for
most models, or the few thousand tokens valid at each row's position for constrained ones.

- Per drawn row, in this order: repetition penalty, temperature, min-p, top-k, top-p (the
  order of Chatterbox's T3.inference; min-p and top-p see the distribution the rules before
  them left).
- Repetition penalty (HF/CTRL rule, over prompt + output tokens) reads a per-request
  presence table kept on the device and updated by one scatter per step, instead of
  uploading every request's history every step.
- A model may declare repetition-aware sampling (models.base.RepetitionAwareSampling,
  CosyVoice 2's rule): a drawn token repeated too often in the request's recent window is
  drawn again from the whole distribution, with noise of its own. The window is a ring of the
  request's last drawn tokens kept on the device (written by the step that draws them), so
  the rule reads nothing from the host and async scheduling can launch the next step first.
- Randomness is counter-based: the exponential-race noise for (seed, output position, token)
  is a hash of those three integers. A seeded request therefore draws the same tokens
  whatever else shares its batch, and the whole batch's noise is one vectorised expression.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from engine.request import SamplingParams
from models.base import Candidates, RepetitionAwareSampling
from models.device_util import upload

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply), on int64 tensors holding values < 2**32."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def race_noise(seeds: torch.Tensor, steps: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Exp(1) noise [N, K] as a pure function of (seed [N], step [N], token id [N, K])."""
    row_key = _mix32((_mix32(seeds & _M32) + steps * 0x9E3779B1) & _M32)  # [N]
    key = _mix32((row_key[:, None] ^ (token_ids & _M32)) & _M32)
    uniform = (key.double() + 0.5) / 2.0**32  # in (0, 1)
    return -torch.log(uniform).float()


@dataclass
class SamplingRow:
    """What the sampler needs of one request this step."""

    request_id: str
    params: SamplingParams
    step: int  # output tokens so far: the position of the token being drawn


@dataclass
class FixedSampling:
    """A step's per-row sampling settings on the device ([B] each, B a graph bucket), for
    `Sampler.sample_fixed`: one expression serves greedy and drawn rows alike. Padding rows
    are greedy and point at the sampler's scratch row."""

    table_rows: torch.Tensor  # int64: each row's row of the presence / recent tables
    greedy: torch.Tensor  # bool
    temperature: torch.Tensor  # float32; 1 for greedy rows
    top_k: torch.Tensor  # int64, <= 0: no top-k
    top_p: torch.Tensor  # float32
    min_p: torch.Tensor  # float32, 0: none
    penalty: torch.Tensor  # float32 repetition penalty (1: none)
    seeds: torch.Tensor  # int64
    steps: torch.Tensor  # int64: the output position being drawn (keys the noise)

    INTS = ("table_rows", "top_k", "seeds", "steps", "greedy")  # packed host-side as int64
    FLOATS = ("temperature", "top_p", "min_p", "penalty")  # packed as float32

    @staticmethod
    def pack_ints(table_row: int, params: SamplingParams, seed: int) -> tuple[int, ...]:
        """A request's INTS, its step 0 (the step is filled in each step)."""
        return (table_row, params.top_k, seed, 0, params.greedy)

    @staticmethod
    def pack_floats(params: SamplingParams) -> tuple[float, ...]:
        """A request's FLOATS (a greedy row's temperature is 1: it divides nothing)."""
        return (
            1.0 if params.greedy else params.temperature,
            params.top_p,
            params.min_p,
            params.repetition_penalty,
        )


class Sampler:
    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        rows: int = 64,
        repetition_aware: RepetitionAwareSampling | None = None,
    ) -> None:
        self.vocab_size = vocab_size
        self.repetition_aware = repetition_aware
        self.device = device
        self._seen = torch.zeros(rows, vocab_size, dtype=torch.bool, device=device)
        # Repetition-aware sampling's window: the token drawn at output position p sits in
        # column p % window of the request's row (-1: nothing drawn there yet).
        window = repetition_aware.window if repetition_aware else 0
        self._recent = torch.full((rows, window), -1, dtype=torch.long, device=device)
        self._row_of: dict[str, int] = {}
        self._free = list(range(rows - 1, -1, -1))
        # Each table row's request's settings as the sampling graphs pack them (FixedSampling's
        # INTS, its steps left 0, and FLOATS), written once at admission: a step gathers its
        # rows' settings with one index instead of reading every request's parameters.
        self.packed_ints = np.zeros((rows, len(FixedSampling.INTS)), dtype=np.int64)
        self.packed_floats = np.ones((rows, len(FixedSampling.FLOATS)), dtype=np.float32)
        # Bumped when the tables are reallocated: graphs that captured them are then stale.
        self.generation = 0
        self.scratch_row: int | None = None  # a row no request owns (reserve)
        self._seed_of: dict[str, int] = {}
        # Marking with a device scalar: `table[i, j] = True` uploads the Python bool from
        # pageable memory, which waits for the GPU to drain and stalls the step.
        self._true = torch.ones((), dtype=torch.bool, device=device)

    # --- per-request state -----------------------------------------------------------------------
    def add_request(self, request_id: str, params: SamplingParams, prompt_ids: list[int]) -> None:
        if not self._free:
            self._grow()
        row = self._free.pop()
        self._row_of[request_id] = row
        seed = params.seed if params.seed is not None else random.getrandbits(31)
        self._seed_of[request_id] = seed
        self.packed_ints[row] = FixedSampling.pack_ints(row, params, seed)
        self.packed_floats[row] = FixedSampling.pack_floats(params)
        self._seen[row].zero_()
        self._recent[row].fill_(-1)
        ids = upload(prompt_ids, torch.long, self.device)
        self._seen[row].index_put_((ids,), self._true)

    def drop_request(self, request_id: str) -> None:
        row = self._row_of.pop(request_id, None)
        self._seed_of.pop(request_id, None)
        if row is not None:
            self._free.append(row)

    def _grow(self, size: int | None = None) -> None:
        """Reallocate the tables with `size` rows (default: twice as many)."""
        old = self._seen.shape[0]
        size = 2 * old if size is None else size
        grown = torch.zeros(size, self.vocab_size, dtype=torch.bool, device=self.device)
        grown[:old] = self._seen
        self._seen = grown
        recent = torch.full((size, self._recent.shape[1]), -1, dtype=torch.long, device=self.device)
        recent[:old] = self._recent
        self._recent = recent
        self._free = list(range(size - 1, old - 1, -1)) + self._free
        self.packed_ints = np.concatenate(
            [self.packed_ints, np.zeros((size - old, self.packed_ints.shape[1]), np.int64)]
        )
        self.packed_floats = np.concatenate(
            [self.packed_floats, np.ones((size - old, self.packed_floats.shape[1]), np.float32)]
        )
        self.generation += 1

    def reserve(self, rows: int) -> None:
        """Make room for `rows` requests at once (so captured graphs see tables that last)
        and set aside a scratch row for graph padding rows to write to."""
        if self._seen.shape[0] < rows + 1:
            self._grow(rows + 1)
        if self.scratch_row is None:
            self.scratch_row = self._free.pop()

    @property
    def capacity(self) -> int:
        return self._seen.shape[0]

    def row_of(self, request_id: str) -> int:
        return self._row_of[request_id]

    def seed_of(self, request_id: str) -> int:
        return self._seed_of[request_id]

    def table_rows(self, request_ids: list[str]) -> np.ndarray:
        """The requests' table rows, as an index into packed_ints / packed_floats."""
        row_of = self._row_of
        return np.fromiter((row_of[r] for r in request_ids), dtype=np.int64, count=len(request_ids))

    # --- the step --------------------------------------------------------------------------------
    def sample(self, cands: Candidates, rows: list[SamplingRow]) -> list[int]:
        """One token per row; records it in the presence table."""
        return self.sample_on_device(cands, rows).tolist()

    def sample_on_device(self, cands: Candidates, rows: list[SamplingRow]) -> torch.Tensor:
        """sample(), leaving the tokens [N] on the device (a depth stage consumes them there)."""
        device = cands.logits.device
        table_rows = upload([self._row_of[r.request_id] for r in rows], torch.long, device)
        token_ids = _token_ids(cands)
        logits = self._penalise(cands.logits, token_ids, table_rows, rows)
        chosen = logits.argmax(dim=-1)
        stochastic = [i for i, r in enumerate(rows) if not r.params.greedy]
        if stochastic:
            chosen = self._draw(logits, token_ids, table_rows, rows, stochastic, chosen)
        tokens = token_ids.gather(1, chosen[:, None])[:, 0]
        self._seen.index_put_((table_rows, tokens), self._true)
        if self.repetition_aware is not None:  # after the draw read the window: now it's in it
            columns = upload(
                [r.step % self.repetition_aware.window for r in rows], torch.long, device
            )
            self._recent.index_put_((table_rows, columns), tokens)
        return tokens

    def _penalise(self, logits, token_ids, table_rows, rows: list[SamplingRow]) -> torch.Tensor:
        if all(r.params.repetition_penalty == 1.0 for r in rows):
            return logits
        penalty = upload([r.params.repetition_penalty for r in rows], logits.dtype, logits.device)[
            :, None
        ]
        return self._penalised(logits, token_ids, table_rows, penalty)

    def _penalised(self, logits, token_ids, table_rows, penalty) -> torch.Tensor:
        """The HF/CTRL repetition penalty [N, 1] on the tokens each row's request has seen."""
        seen = self._seen[table_rows[:, None], token_ids]  # [N, K]
        penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
        return torch.where(seen, penalised, logits)

    def _draw(
        self, logits, token_ids, table_rows, rows, stochastic: list[int], chosen
    ) -> torch.Tensor:
        device = logits.device
        idx = upload(stochastic, torch.long, device)
        sub = [rows[i] for i in stochastic]
        temp = upload([r.params.temperature for r in sub], torch.float32, device)
        top_k = upload([r.params.top_k for r in sub], torch.long, device)
        top_p = upload([r.params.top_p for r in sub], torch.float32, device)
        nucleus = any(r.params.top_p < 1.0 for r in sub)
        max_k = max(r.params.top_k for r in sub)
        scaled = logits[idx] / temp[:, None]
        if any(r.params.min_p > 0.0 for r in sub):
            scaled = keep_min_p(
                scaled, upload([r.params.min_p for r in sub], torch.float32, device)
            )
        probs = top_k_top_p(scaled, top_k, top_p, nucleus, max_k).softmax(dim=-1)
        seeds = upload([self._seed_of[r.request_id] for r in sub], torch.long, device)
        steps = upload([r.step for r in sub], torch.long, device)
        noise = race_noise(seeds, steps, token_ids[idx])
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p.
        drawn = (probs / noise).argmax(dim=-1)
        if self.repetition_aware is not None:
            recent = self._recent[table_rows[idx]]  # [S, window]
            drawn = self._redraw_repeats(
                logits[idx] / temp[:, None], token_ids[idx], recent, drawn, seeds, steps
            )
        chosen = chosen.clone()
        chosen[idx] = drawn
        return chosen

    def _redraw_repeats(self, logits, token_ids, recent, drawn, seeds, steps):
        """RAS: rows whose drawn token occurs max_repeats times or more in their recent window
        (recent [N, window], -1 where nothing was drawn yet) take a draw from the whole
        (temperature-scaled) distribution instead, with noise keyed apart from the first
        draw's so the two draws are independent."""
        first = token_ids.gather(1, drawn[:, None])  # [N, 1]
        repeats = (recent == first).sum(dim=1)
        noise = race_noise(seeds ^ 0x5A5A5A5, steps, token_ids)
        fallback = (logits.softmax(dim=-1) / noise).argmax(dim=-1)
        return torch.where(repeats >= self.repetition_aware.max_repeats, fallback, drawn)

    def sample_fixed(self, cands: Candidates, x: FixedSampling) -> torch.Tensor:
        """sample_on_device for a fixed batch with no host branches (a CUDA graph captures
        it: engine/sampling_graphs.py). Every row takes the penalty (1: none) and the nucleus
        path; greedy rows then take the argmax. It draws what sample_on_device draws for
        the same rows whenever some drawn row there has top_p < 1 (its nucleus path) or
        none is drawn; steps whose drawn rows all keep top_p = 1 stay eager."""
        token_ids = _token_ids(cands)
        logits = self._penalised(cands.logits, token_ids, x.table_rows, x.penalty[:, None])
        best = logits.argmax(dim=-1)
        scaled = logits / x.temperature[:, None]
        probs = top_k_top_p(keep_min_p(scaled, x.min_p), x.top_k, x.top_p).softmax(dim=-1)
        drawn = (probs / race_noise(x.seeds, x.steps, token_ids)).argmax(dim=-1)
        if self.repetition_aware is not None:
            recent = self._recent[x.table_rows]
            drawn = self._redraw_repeats(scaled, token_ids, recent, drawn, x.seeds, x.steps)
        chosen = torch.where(x.greedy, best, drawn)
        tokens = token_ids.gather(1, chosen[:, None])[:, 0]
        self._seen.index_put_((x.table_rows, tokens), self._true)
        if self.repetition_aware is not None:
            columns = x.steps % self.repetition_aware.window
            self._recent.index_put_((x.table_rows, columns), tokens)
        return tokens


def _token_ids(cands: Candidates) -> torch.Tensor:
    """[N, K] vocabulary id of each candidate column."""
    if cands.token_ids is not None:
        return cands.token_ids
    n, k = cands.logits.shape
    return torch.arange(k, device=cands.logits.device).expand(n, k)


def keep_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) each row's tokens less probable than its min_p [N] times its likeliest
    token's probability (transformers' MinPLogitsWarper; the likeliest always stays, and
    min_p = 0 keeps the row whole)."""
    probs = logits.softmax(dim=-1)
    floor = min_p[:, None] * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < floor, float("-inf"))


def top_k_top_p(
    logits: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    nucleus: bool = True,
    max_k: int = 0,
) -> torch.Tensor:
    """Mask (to -inf) everything outside each row's top-k and top-p nucleus. The caller knows
    on the host whether any row has a nucleus (top_p < 1) and the largest top-k; without a
    nucleus a top-k threshold replaces the full sort (the depth stages of CSM and Moshi draw
    31 and 16 codebooks a frame that way, and voxgate-tiny 7 on a CPU)."""
    if not nucleus:
        return _top_k(logits, top_k, max_k)
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, logits.shape[-1])[:, None]
    drop = ranks >= k
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass strictly above each token
    drop |= before > top_p[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def _top_k(logits: torch.Tensor, top_k: torch.Tensor, max_k: int) -> torch.Tensor:
    """Rows keep the logits at or above their k-th largest (a tie at the threshold is kept, as
    in transformers' TopKLogitsWarper); top_k <= 0 keeps the row whole."""
    m = min(max(max_k, 1), logits.shape[-1])
    largest = logits.topk(m, dim=-1).values  # [N, m], descending
    threshold = largest.gather(1, (top_k.clamp(min=1, max=m) - 1)[:, None])
    return logits.masked_fill((logits < threshold) & (top_k > 0)[:, None], float("-inf"))
