"""A benchmark-only sampling constraint for turn-based models whose replies interleave
transcript text with speech codes (GLM-4-Voice, Step-Audio 2), used with `--random-weights`.

A trained model keeps its own mix of text and speech tokens. Random weights favour no kind of
id, so a reply's tokens are speech codes only as often as the vocabulary holds them, and a
reply of N tokens carries a fraction of the audio a trained model's would. Under this
constraint a reply is a repetition of blocks: `text` positions that may only draw text ids,
then `speech` positions that may only draw speech codes. Stop ids are allowed only where a
block starts (after whole blocks) and only where the engine already allows a stop
(min_tokens reached). Each row's block position is its output position (the engine's
`steps`), so the rule needs nothing from the host and runs inside a CUDA graph of the step's
head and sampling (engine/sampling_graphs.py).

Off (the default: trained checkpoints), a model never builds one and samples as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from models.base import Candidates


@dataclass(frozen=True)
class InterleaveRule:
    """A reply as repeated blocks of `text` text tokens, then `speech` speech codes."""

    text: int
    speech: int

    def __post_init__(self) -> None:
        if self.text < 0 or self.speech < 1:
            raise ValueError("an interleave block needs text >= 0 and speech >= 1 tokens")

    @property
    def period(self) -> int:
        return self.text + self.speech

    def is_speech_position(self, position: int) -> bool:
        """Whether output position `position` (0-based) of a reply is a speech position."""
        return position % self.period >= self.text

    def speech_codes(self, tokens: int) -> int:
        """Speech codes among a reply's first `tokens` tokens."""
        whole, rest = divmod(tokens, self.period)
        return whole * self.speech + max(0, rest - self.text)

    def tokens_per_second(self, code_rate_hz: float) -> float:
        """Generated tokens per second of audio at `code_rate_hz` speech codes per second."""
        return code_rate_hz * self.period / self.speech


class InterleaveConstraint:
    """InterleaveRule applied to logits over a vocabulary of `vocab_size` ids: `text_ids` and
    `speech_ids` are the ids each kind of position may draw, `stop_ids` the model's stops."""

    def __init__(
        self,
        rule: InterleaveRule,
        vocab_size: int,
        text_ids: range,
        speech_ids: range,
        stop_ids: Sequence[int],
    ) -> None:
        for name, ids in (("text", text_ids), ("speech", speech_ids)):
            if not len(ids) or ids.start < 0 or ids.stop > vocab_size:
                raise ValueError(f"{name} ids {ids} do not fit a vocabulary of {vocab_size}")
        if set(text_ids) & set(speech_ids):
            raise ValueError("text and speech ids overlap")
        self.rule = rule
        self.vocab_size = vocab_size
        self.text_ids, self.speech_ids = text_ids, speech_ids
        self.stop_ids = tuple(int(s) for s in stop_ids)
        self._tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(text allowed [V] bool, speech allowed [V] bool, stop ids [S] int64) on `device`,
        made once (a graph capture sees tensors that last)."""
        if self._tables is None or self._tables[0].device != device:
            text = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
            speech = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
            text[self.text_ids.start : self.text_ids.stop] = True
            speech[self.speech_ids.start : self.speech_ids.stop] = True
            stops = torch.tensor(self.stop_ids, dtype=torch.long, device=device)
            self._tables = (text, speech, stops)
        return self._tables

    def apply(
        self, logits: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor
    ) -> torch.Tensor:
        """logits [N, V] (float), allow_stop [N] bool, steps [N] int64 (each row's output
        position) → the logits with every id the row's position may not draw at -inf."""
        if logits.shape[-1] != self.vocab_size:
            raise ValueError(f"logits have {logits.shape[-1]} columns, the rule {self.vocab_size}")
        text, speech, stops = self.tables(logits.device)
        position = steps % self.rule.period
        allowed = torch.where((position < self.rule.text)[:, None], text, speech)  # [N, V]
        stop_ok = (allow_stop & (position == 0))[:, None].expand(-1, stops.shape[0])
        allowed[:, stops] = stop_ok
        return logits.masked_fill(~allowed, float("-inf"))


class InterleavedSampling:
    """The sampling of a model that may carry an InterleaveConstraint (`self.interleave`, None
    when off): the default (whole vocabulary, stop ids held back before min_tokens) while off,
    the constrained logits on the device while on. Listed before the model's base class, whose
    `candidate_logits` it falls back to."""

    interleave: InterleaveConstraint | None

    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        if self.interleave is None:
            return super().candidate_logits(hidden, num_generated, allow_stop)  # type: ignore[misc]
        return self.device_candidates_of(hidden, num_generated, allow_stop)  # type: ignore[attr-defined]

    def device_candidates(
        self, hidden: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor
    ) -> Candidates | None:
        """With the constraint: the whole vocabulary, the ids the row's block position may not
        draw at -inf (device tensors alone: CUDA-graph safe). Without it: None (eager
        sampling, graphable_candidates says so)."""
        if self.interleave is None:
            return None
        logits = self.interleave.apply(self.compute_logits(hidden), allow_stop, steps)  # type: ignore[attr-defined]
        return Candidates(logits, None)

    def graphable_candidates(self) -> bool:
        return self.interleave is not None
