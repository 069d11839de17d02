"""The streaming detokenizer's flow call over cached context (`FlowHiftDetokenizer(...,
estimator_cache=True)`): each chunk's Euler solve runs on the chunk's own frames, attending to
the stream's cached keys, values and convolution history (estimator_cache.py), instead of
re-integrating its context chunks with it.

What stays as in the windowed call (streaming.py): the conditioning encoder runs over each
row's window of tokens (voice prompt, `context_chunks` chunks, the chunk, its look-ahead), and
a frame starts from the same frame-indexed noise. What changes: the estimator's context is
what the stream's earlier chunks left in the cache, bounded to the voice prompt and the last
`context_chunks` chunks — CosyVoice's streaming with `num_decoding_left_chunks` left chunks —
where the window re-ran those chunks with a shorter history of their own. With
`context_chunks=None` both are unbounded and equal CosyVoice's own streaming.

A stream's voice prompt enters the cache at its first chunk, one attention chunk at a time, with
the prompt's mel as the condition (its solved frames are not kept). Rows are batched by shape
(cached frames, new frames): in steady state every stream's row has one shape. Eager only so
far: CUDA graphs of these shapes, with the caches in fixed pools, are the next step
(BENCHMARKS.md, "What bounds CosyVoice 2").
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import torch

from models.codecs.flow_hift.estimator_cache import PassCache, empty_pass_cache, solve_euler_cached

if TYPE_CHECKING:
    from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowWindow


def flow_call_cached(detok: FlowHiftDetokenizer, rows: list[FlowWindow]) -> None:
    """Make the rows' chunks' mel (each row one chunk) and extend their streams' caches."""
    r = detok.ratio
    seqs, prompts, out_lengths = detok.row_tokens(rows)
    frames = r * max(out_lengths)
    width = max(len(q) for q in seqs)
    ints, prompt_mel, speaker = detok._flow_inputs(
        rows, seqs, out_lengths, len(rows), frames, width
    )
    z, mu, _, spks, cond, _ = detok.condition_rows(ints, prompt_mel, speaker)
    # A stream's rows are its successive chunks: each needs the cache the one before left, so
    # they go in waves (the first row of every stream, then the second, ...).
    waves: list[list[int]] = []
    seen: dict[int, int] = defaultdict(int)
    for i, w in enumerate(rows):
        k = seen[id(w.state)]
        seen[id(w.state)] += 1
        if k == len(waves):
            waves.append([])
        waves[k].append(i)
    for wave in waves:
        for i in wave:
            if rows[i].state.flow_cache is None:
                _enter_prompt(detok, rows[i], z[i], mu[i], spks[i], cond[i], prompts[i])
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i in wave:
            w = rows[i]
            new = r * (w.end - w.first)
            groups[(w.state.flow_cache[0].frames, new)].append(i)
        for members in groups.values():
            _solve_group(detok, [rows[i] for i in members], members, z, mu, spks, cond, prompts)


def _chunk_frames(detok: FlowHiftDetokenizer, w: FlowWindow, prompt: int) -> slice:
    """The frames of the row's chunk within the row (after its prompt and context)."""
    r = detok.ratio
    return slice(r * (prompt + w.first - w.start), r * (prompt + w.end - w.start))


def _solve_group(detok, rows, members, z, mu, spks, cond, prompts) -> None:
    frames = [_chunk_frames(detok, w, prompts[i]) for w, i in zip(rows, members, strict=True)]
    z_new = torch.stack([z[i, :, f] for i, f in zip(members, frames, strict=True)])
    mu_new = torch.stack([mu[i, :, f] for i, f in zip(members, frames, strict=True)])
    cond_new = torch.stack([cond[i, :, f] for i, f in zip(members, frames, strict=True)])
    caches = _stack([w.state.flow_cache for w in rows])
    mel, caches = solve_euler_cached(detok.flow, z_new, mu_new, spks[members], cond_new, caches)
    for b, (w, per_stream) in enumerate(zip(rows, _unstack(caches, len(rows)), strict=True)):
        s = w.state
        s.flow_cache = _bounded(detok, per_stream, prompt_frames=detok.ratio * prompts[members[b]])
        s.mel = mel[b] if s.mel is None else torch.cat([s.mel, mel[b]], dim=1)
        s.tokens_decoded = w.end


def _enter_prompt(detok, w: FlowWindow, z, mu, spks, cond, prompt: int) -> None:
    """Solve the voice prompt's frames into the stream's cache, one attention chunk at a time
    (the prompt is whole chunks); an empty cache without a prompt."""
    caches = None
    step = detok.ratio * detok.chunk
    for lo in range(0, detok.ratio * prompt, step):
        f = slice(lo, lo + step)
        _, caches = solve_euler_cached(
            detok.flow, z[None, :, f], mu[None, :, f], spks[None], cond[None, :, f], caches
        )
    if caches is None:
        estimator = detok.flow.decoder.estimator
        caches = [
            empty_pass_cache(estimator, 2, z.device, mu.dtype)
            for _ in range(detok.flow.cfg.n_timesteps)
        ]
    w.state.flow_cache = caches


def _stack(per_stream: list[list[PassCache]]) -> list[PassCache]:
    """Streams' caches (each batch 2: conditional, unconditional) → one batch of 2B rows laid
    out as the solver's CFG batch: every stream's conditional row, then every unconditional."""

    def cat(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t[:1] for t in tensors] + [t[1:] for t in tensors])

    out = []
    for step in zip(*per_stream, strict=True):
        out.append(
            PassCache(
                [cat(list(t)) for t in zip(*(c.keys for c in step), strict=True)],
                [cat(list(t)) for t in zip(*(c.values for c in step), strict=True)],
                [cat(list(t)) for t in zip(*(c.convs for c in step), strict=True)],
            )
        )
    return out


def _unstack(caches: list[PassCache], n: int) -> list[list[PassCache]]:
    """_stack's inverse: stream b's rows are b and n + b."""

    def rows(t: torch.Tensor, b: int) -> torch.Tensor:
        return torch.cat([t[b : b + 1], t[n + b : n + b + 1]])

    return [
        [
            PassCache(
                [rows(k, b) for k in c.keys],
                [rows(v, b) for v in c.values],
                [rows(x, b) for x in c.convs],
            )
            for c in caches
        ]
        for b in range(n)
    ]


def _bounded(detok, caches: list[PassCache], prompt_frames: int) -> list[PassCache]:
    """The voice prompt's frames and the last `context_chunks` chunks' (all with None)."""
    if detok.context_chunks is None:
        return caches
    last = detok.ratio * detok.chunk * detok.context_chunks
    if caches[0].frames <= prompt_frames + last:
        return caches
    return [c.prompt_and_last(prompt_frames, last) for c in caches]
