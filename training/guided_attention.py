"""Guided attention for the SpeechLM: push a few heads to read the text monotonically.

Measured on the H200 (BENCHMARKS.md, voxgate-tiny runs): trained on 30 h of templated teacher
sentences, the decoder-only model speaks fluent English whose first words follow the text and
whose rest drifts into other sentences of the corpus (held-out WER 76 %). It learnt the corpus's
language model faster than the text-to-speech alignment. Tachibana et al. (2017, "Efficiently
trainable text-to-speech ... with guided attention", DC-TTS) fix exactly this with a penalty on
attention far from the diagonal: frame n of N should look near character n/N·T of T.

Here a decoder-only model has no separate cross-attention, so the penalty goes on chosen
(layer, head) pairs of the causal self-attention, scoring only how each audio row spreads its
attention over the text rows (softmax restricted to those keys: proportional to the head's real
weights on them). Training-only; the served model and the engine are unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from models.voxgate_tiny.lm import DenseCausalAttention


def diagonal_penalty_weights(
    text_len: torch.Tensor, audio_len: torch.Tensor, length: int, width: float = 0.2
) -> torch.Tensor:
    """[B, L, L] weights W[b, query, key] = 1 - exp(-(t/T - n/N)² / 2g²) for query rows that
    are frames (n = frame index, N frames) and key rows that are text (t = text index, T rows);
    0 elsewhere. Rows are laid out as the trainer's batches: T text rows, then N frame rows."""
    pos = torch.arange(length, device=text_len.device)
    t_len = text_len[:, None].float()
    n_len = audio_len[:, None].float()
    key = pos[None, :].float() / t_len  # [B, L] normalised text position
    query = (pos[None, :].float() - t_len) / n_len  # [B, L] normalised frame position
    is_key = pos[None, :] < text_len[:, None]
    is_query = (pos[None, :] >= text_len[:, None]) & (
        pos[None, :] < (text_len + audio_len)[:, None]
    )
    w = 1.0 - torch.exp(-((key[:, None, :] - query[:, :, None]) ** 2) / (2 * width**2))
    return w * (is_query[:, :, None] & is_key[:, None, :])


def pointer_penalty_weights(
    text_len: torch.Tensor, pointer: torch.Tensor, width: float = 1.5
) -> torch.Tensor:
    """[B, L, L] weights for a reading model, whose frame rows know the symbol they say:
    W[b, query, key] = 1 - exp(-(key - 1 - pointer)² / 2w²) (w in symbols; key 1 + i is symbol
    i's prompt row, after <bos>) for frame queries (pointer[b, query] ≥ 0) and text keys; 0
    elsewhere. pointer [B, L]: each row's pointer, -1 on rows that are not frames."""
    length = pointer.shape[1]
    pos = torch.arange(length, device=pointer.device).float()
    target = 1.0 + pointer.float()  # [B, L]
    w = 1.0 - torch.exp(-((pos[None, None, :] - target[:, :, None]) ** 2) / (2 * width**2))
    is_key = torch.arange(length, device=pointer.device)[None, :] < text_len[:, None]
    return w * ((pointer >= 0)[:, :, None] & is_key[:, None, :])


def off_diagonal_mass(
    probs: torch.Tensor, weights: torch.Tensor, query_mask: torch.Tensor
) -> torch.Tensor:
    """Mean over frame queries of the attention mass placed away from the diagonal, in [0, 1].
    probs/weights [B, L, L], query_mask [B, L]."""
    per_query = (probs * weights).sum(-1)  # [B, L]
    return (per_query * query_mask).sum() / query_mask.sum().clamp(min=1)


class GuidedAttention(DenseCausalAttention):
    """DenseCausalAttention that also scores `heads` of `layers` against the diagonal.

    `penalty` accumulates over the forward pass (one term per guided layer, averaged)."""

    def __init__(
        self,
        batch: int,
        length: int,
        text_len: torch.Tensor,
        audio_len: torch.Tensor,
        layers: frozenset[int],
        heads: int,
        width: float = 0.2,
        pointer: torch.Tensor | None = None,
    ) -> None:
        """`pointer` [B, L] (a reading model's frame rows' pointers, -1 elsewhere): guide each
        frame to the prompt row of the symbol it says (pointer_penalty_weights) rather than to
        the diagonal, which is only where that symbol is on average."""
        super().__init__(batch, length)
        self.layers, self.heads = layers, heads
        self.text_len = text_len
        self.keys = int(text_len.max())  # text rows sit first: only these keys are scored
        if pointer is not None:
            weights = pointer_penalty_weights(text_len, pointer)
        else:
            weights = diagonal_penalty_weights(text_len, audio_len, length, width)
        self.weights = weights[:, :, : self.keys]
        pos = torch.arange(length, device=text_len.device)
        self.query_mask = (
            (pos[None, :] >= text_len[:, None]) & (pos[None, :] < (text_len + audio_len)[:, None])
        ).float()
        self.key_mask = pos[None, : self.keys] < text_len[:, None]  # [B, keys]
        self.terms: list[torch.Tensor] = []

    @property
    def penalty(self) -> torch.Tensor:
        return torch.stack(self.terms).mean()

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        if layer in self.layers:
            self.terms.append(self._score(q, k))
        return super().forward(layer, q, k, v)

    def _score(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        b, n = self.batch, self.length
        group = q.shape[1] // k.shape[1]
        qh = q.view(b, n, *q.shape[1:])[:, :, : self.heads].float()  # [B, L, h, D]
        kvh = torch.arange(self.heads, device=q.device) // group
        kh = k.view(b, n, *k.shape[1:])[:, : self.keys, kvh].float()  # [B, keys, h, D]
        logits = torch.einsum("bqhd,bkhd->bhqk", qh, kh) / math.sqrt(q.shape[-1])
        logits = logits.masked_fill(~self.key_mask[:, None, None, :], float("-inf"))
        probs = F.softmax(logits, dim=-1)  # [B, h, L, keys]
        terms = [
            off_diagonal_mass(probs[:, h], self.weights, self.query_mask) for h in range(self.heads)
        ]
        return torch.stack(terms).mean()
