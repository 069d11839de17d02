"""CUDA graphs for fresh prompts: prefill chunks that start at a request's first token.

A decode step replays one graph per batch bucket (engine/cuda_graphs.py); a step with a
prompt in it, run eagerly, launches every layer's kernels one by one from Python, some
hundreds a forward. On a loaded host each launch costs tens of microseconds, so the turn that
prefills one arrival's prompt eagerly takes about three decode turns' time
(docs/benchmark-history.md), and under a ramp of arrivals those turns are where the listeners
fall behind.

A fresh prompt needs nothing from the KV cache: each of its tokens attends to the tokens
before it in the same chunk, all of which are in the step. So its attention is plain causal
attention over the step's own q, k and v (`PromptAttention`), which has fixed shapes once the
step is padded to a bucket of tokens, and the whole forward replays as one graph per token
bucket (`PromptGraphs`). Several prompts packed in one step are kept apart by a mask built
from each token's segment (its chunk); padding tokens attend only to themselves, read token 0
at position 0 and write their k/v to the cache's scratch page. The k/v of real tokens go to
their pages as in any step, for the decodes after.

Chunks that continue earlier tokens (a long prompt in several chunks, a conversation's kept
prefix) read the cache and stay eager. `PromptGraphs.run` runs the same static buffers
eagerly where nothing was captured (the CPU), which is how the CPU tests check it.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F

from engine.attention import AttentionBackend, KVCache, StepLayout, store_kv_pair
from engine.cuda_graphs import DecodeGraphs, Forward
from models.device_util import StagingRing

log = logging.getLogger("voxgate.graphs")

# Token counts a step's prompts are padded to. Orpheus' prompts are tens of tokens; a voice
# prompt's speech tokens (CosyVoice 2) a few hundred. Larger steps run eagerly.
PROMPT_BUCKETS = (16, 32, 64, 128, 256, 512)


class PromptAttention(AttentionBackend):
    """Attention for steps of fresh prompts only, padded to `graph_batch` tokens: no page of
    the cache is read, each token sees the tokens of its own chunk up to itself."""

    name = "prompt"
    supports_graphs = True

    def __init__(self, cache: KVCache, num_q_heads: int, max_tokens: int) -> None:
        super().__init__(cache)
        device = cache.k[0].device
        self.group = num_q_heads // cache.num_kv_heads  # query heads per kv head
        self.max_tokens = max_tokens
        self._slots = torch.zeros(max_tokens, dtype=torch.long, device=device)
        self._segments = torch.zeros(max_tokens, dtype=torch.long, device=device)
        self._slots_staging = StagingRing(max_tokens, torch.long, device)
        self._segments_staging = StagingRing(max_tokens, torch.long, device)
        # One flat buffer: a bucket of T tokens reads its first T*T entries as a [T, T] mask.
        self._mask = torch.zeros(max_tokens * max_tokens, dtype=torch.bool, device=device)

    def prepare(self, layout: StepLayout, graph_batch: int | None = None) -> None:
        if layout.context_lens != layout.query_lens:
            raise ValueError(
                "prompt attention takes only chunks that start at a request's first token"
            )
        n = layout.num_tokens
        tokens = graph_batch or n
        if tokens > self.max_tokens or tokens < n:
            raise ValueError(
                f"a step of {n} prompt tokens does not fit {tokens} (at most {self.max_tokens})"
            )
        with self._slots_staging.fill(self._slots[:tokens]) as slots:
            slots[:n] = layout.slot_mapping
            slots[n:] = self.cache.scratch_block * layout.block_size  # padding: scratch page
        chunks = len(layout.query_lens)
        with self._segments_staging.fill(self._segments[:tokens]) as segments:
            segments[:n] = np.repeat(np.arange(chunks), layout.query_lens)  # each token's chunk
            segments[n:] = np.arange(chunks, chunks + tokens - n)  # each padding token its own
        seg = self._segments[:tokens]
        mask = self._mask[: tokens * tokens].view(tokens, tokens)
        torch.eq(seg[:, None], seg[None, :], out=mask)
        mask.tril_()

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        tokens = q.shape[0]
        slots = self._slots[:tokens]
        store_kv_pair(self.cache.k[layer], self.cache.v[layer], slots, k, v)
        mask = self._mask[: tokens * tokens].view(tokens, tokens)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None],
            self._per_query_head(k),
            self._per_query_head(v),
            attn_mask=mask,
        )  # [1, Hq, T, D]
        return out[0].transpose(0, 1)  # [T, Hq, D]

    def _per_query_head(self, x: torch.Tensor) -> torch.Tensor:
        """[T, Hkv, D] → [1, Hq, T, D], each kv head repeated for its group of query heads (an
        expand and a copy: fixed shapes, nothing waits for the device)."""
        t, heads, d = x.shape
        grouped = x.transpose(0, 1)[:, None].expand(heads, self.group, t, d)
        return grouped.reshape(1, heads * self.group, t, d)


class PromptGraphs(DecodeGraphs):
    """The backbone's forward over a step of fresh prompts, one graph per token bucket
    (`PROMPT_BUCKETS`): `run` pads the step's tokens to the smallest bucket that holds them.
    The same static buffers and padding as the decode graphs, with a token where those have a
    row; `max_batch` is the most tokens a graph takes."""

    kind = "prompt graphs for token counts"

    def __init__(
        self,
        forward: Forward,
        attn: PromptAttention,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        block_size: int,
        buckets: tuple[int, ...] = PROMPT_BUCKETS,
        row_width: int = 0,
    ) -> None:
        """`row_width` > 0: each token is a row of ids (models with several codebooks a frame),
        padding tokens a row of zeros."""
        super().__init__(forward, attn, hidden_size, dtype, device, block_size, buckets, row_width)

    def _dummy_layout(self, batch: int) -> StepLayout:
        return StepLayout([], [], [], [], self.block_size)  # all padding

    def run(
        self,
        input_ids: torch.Tensor,
        positions: list[int],
        layout: StepLayout,
        prepare=None,
    ) -> torch.Tensor:
        """Hidden states [n, H] of the step's n prompt tokens: a replay of the smallest bucket
        that holds them, or where none was captured (the CPU) the same forward on the same
        padded buffers, eagerly."""
        n = input_ids.shape[0]
        batch = self.bucket_for(n)
        if batch is None:
            raise ValueError(
                f"{n} prompt tokens exceed the largest prompt graph ({self.max_batch})"
            )
        if batch in self._graphs:
            return super().run(input_ids, positions, layout, prepare)
        self.stage(input_ids, positions, layout, batch, prepare)
        self._out[:batch] = self.forward(self._ids[:batch], self._pos[:batch], self.attn)
        return self._out[:n]
