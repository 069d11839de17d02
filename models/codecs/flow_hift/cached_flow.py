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
the prompt's mel as the condition (its solved frames are not kept).

Two ways to keep a stream's context, with the same results:
- its slot of the detokenizer's pool (cache_pool.py), when it has one (a pool is configured, a
  slot is free, the prompt fits): a job's rows are padded to a row bucket and each chunk's
  solve is one call of fixed shapes (static_cache.py), replayed from a CUDA graph per row
  bucket; the conditioning is captured per (rows, frames) bucket like the windowed flow.
- otherwise per-step PassCaches grown by concatenation (estimator_cache.py), eagerly, rows
  batched by shape (cached frames, new frames).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from models.codecs.flow_hift.estimator_cache import PassCache, empty_pass_cache, solve_euler_cached
from models.codecs.flow_hift.hift_stream import graph_calls, note_eager

if TYPE_CHECKING:
    from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowWindow


def flow_call_cached(detok: FlowHiftDetokenizer, rows: list[FlowWindow]) -> None:
    """Make the rows' chunks' mel (each row one chunk) and extend their streams' caches."""
    seqs, prompts, out_lengths = detok.row_tokens(rows)
    z, mu, spks, cond = _condition(detok, rows, seqs, out_lengths)
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
        pooled = [i for i in wave if _pool_slot(detok, rows[i].state, prompts[i]) is not None]
        if pooled:
            _solve_pooled(detok, rows, pooled, z, mu, spks, cond, prompts)
        eager = [i for i in wave if rows[i].state.pool_slot is None]
        for i in eager:
            if rows[i].state.flow_cache is None:
                _enter_prompt(detok, rows[i], z[i], mu[i], spks[i], cond[i], prompts[i])
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i in eager:
            w = rows[i]
            new = detok.ratio * (w.end - w.first)
            groups[(w.state.flow_cache[0].frames, new)].append(i)
        for members in groups.values():
            _solve_group(detok, [rows[i] for i in members], members, z, mu, spks, cond, prompts)


def _condition(detok, rows, seqs, out_lengths) -> tuple[list, list, list, list]:
    """flow.condition over each row's window → per row z, mu, cond [M, F_row] and spks [M]:
    in calls of at most the largest row bucket, each replayed from the ("cond", rows, frames)
    graph when one was captured."""
    n = len(rows)
    z, mu, spks, cond = [None] * n, [None] * n, [None] * n, [None] * n
    graphed = detok.graphs is not None
    for call in graph_calls(list(range(n)), detok.graph_rows, graphed):
        out = detok.run_bucketed(
            "cond",
            detok.condition_rows,
            [rows[i] for i in call],
            [seqs[i] for i in call],
            [out_lengths[i] for i in call],
        )
        if graphed:  # a replay's outputs are rewritten by the next one (another call here)
            out = [t.clone() for t in out]
        zc, muc, _, spc, condc, _ = out
        for j, i in enumerate(call):
            z[i], mu[i], spks[i], cond[i] = zc[j], muc[j], spc[j], condc[j]
    return z, mu, spks, cond


def _pool_slot(detok, state, prompt: int):
    """The stream's pool slot, taking one for a new stream when the pool has room (freed when
    the stream is dropped); None: the eager PassCache path."""
    pool = detok.cache_pool
    if state.pool_slot is not None and state.pool_slot.released:
        # Its slot may hold another stream's context by now: decoding on would corrupt both.
        raise RuntimeError("a flow stream was decoded after its last chunk")
    if state.pool_slot is None and state.flow_cache is None and pool is not None:
        slot = pool.alloc(detok.ratio * prompt)
        if slot is not None:
            state.pool_slot = slot
            # A stream dropped before its last chunk (cancelled) gives its slot back when it
            # is collected; one that ends gives it back at once (release_finished).
            weakref.finalize(state, pool.release, slot)
    return state.pool_slot


def _solve_pooled(detok, rows, members, z, mu, spks, cond, prompts) -> None:
    """One wave's rows whose streams have pool slots: new streams' voice prompts first (one
    attention chunk at a time), then each row's chunk."""
    pool, frames = detok.cache_pool, detok.ratio * detok.chunk
    entering = [i for i in members if not rows[i].state.pool_slot.entered]
    for c in range(max((prompts[i] // detok.chunk for i in entering), default=0)):
        columns = list(range(c * frames, (c + 1) * frames))
        items = [
            (i, slice(c * frames, (c + 1) * frames), columns, rows[i].state.pool_slot.index)
            for i in entering
            if prompts[i] // detok.chunk > c
        ]
        _pool_calls(detok, items, z, mu, spks, cond)  # the prompt's own mel is not kept
    for i in entering:
        rows[i].state.pool_slot.entered = True
    items = []
    for i in members:
        f, slot = _chunk_frames(detok, rows[i], prompts[i]), rows[i].state.pool_slot
        items.append((i, f, pool.take_positions(slot, f.stop - f.start, frames), slot.index))
    for (i, f, *_), mel in zip(items, _pool_calls(detok, items, z, mu, spks, cond), strict=True):
        w, s = rows[i], rows[i].state
        new = mel[:, : f.stop - f.start]
        s.mel = new.clone() if s.mel is None else torch.cat([s.mel, new], dim=1)
        s.tokens_decoded = w.end


def _pool_calls(detok, items, z, mu, spks, cond) -> list[torch.Tensor]:
    """`items` (see pool_call_inputs) in calls of at most the largest row bucket, each padded
    to its bucket and replayed from the ("pool", rows) graph when there is one → each item's
    mel [M, T] (frames past its chunk are padding)."""
    graphed, out = detok.graphs is not None, []
    frames = detok.ratio * detok.chunk
    for call in graph_calls(items, detok.graph_rows, graphed):
        rows = next((r for r in detok.graph_rows if r >= len(call)), len(call))
        key = ("pool", rows)
        if not graphed or key not in detok.graphs:
            key, rows = None, len(call)
        inputs = pool_call_inputs(detok, rows, call, z, mu, spks, cond)
        if key is None:
            if graphed:
                note_eager(detok.eager_calls, ("pool", len(call), frames))
            mel = detok.cache_pool.solve(*inputs)
        else:  # a replay's output is rewritten by the next one (another call of this job)
            mel = detok.graphs.run(key, detok.cache_pool.solve, inputs).clone()
        out += [mel[j] for j in range(len(call))]
    return out


def release_finished(detok, states, final: list[bool]) -> None:
    """Streams whose last chunk was just solved need their context no more: their slots go
    back to the pool now rather than when the streams are collected. Called at the end of a
    job: the job's writes to the slots must be done before another thread's job (the lane's,
    on its own stream) may take a slot and clear it."""
    done = [s for s, fin in zip(states, final, strict=True) if fin and s.pool_slot is not None]
    if done and detok.device.type == "cuda":
        torch.cuda.current_stream(detok.device).synchronize()
    for state in done:
        detok.cache_pool.release(state.pool_slot)


def pool_call_inputs(detok, rows: int, items=(), z=(), mu=(), spks=(), cond=()):
    """cache_pool.solve's inputs for `rows` rows (a bucket), filled from `items` (row index,
    its chunk's frame slice, the pool columns of its frames, its slot) and padded with rows
    that write to the scratch slot: z, mu, cond [rows, M, T], spks [rows, M], ints
    [rows, T + 2]."""
    pool, t = detok.cache_pool, detok.ratio * detok.chunk
    m, dev, dtype = detok.flow.cfg.output_size, detok.device, detok.dtype
    ints = torch.zeros(rows, t + 2, dtype=torch.long, pin_memory=detok.pinned)
    table = ints.numpy()
    table[:, 0], table[:, 1], table[:, 2:] = t, pool.scratch, pool.cap
    parts: list[list[torch.Tensor]] = [[], [], [], []]
    for j, (i, f, columns, slot) in enumerate(items):
        n = f.stop - f.start
        table[j, 0], table[j, 1], table[j, 2:] = n, slot, columns
        for part, source in zip(parts, (z, mu, cond), strict=False):
            part.append(F.pad(source[i][:, f], (0, t - n)))
        parts[3].append(spks[i])
    pad = rows - len(items)
    z_in, mu_in, cond_in = (
        F.pad(torch.stack(p), (0, 0, 0, 0, 0, pad))
        if p
        else torch.zeros(rows, m, t, device=dev, dtype=dtype)
        for p in parts[:3]
    )
    spks_in = (
        F.pad(torch.stack(parts[3]), (0, 0, 0, pad))
        if items
        else torch.zeros(rows, m, device=dev, dtype=dtype)
    )
    return [z_in, mu_in, spks_in, cond_in, ints.to(dev, non_blocking=True)]


def _chunk_frames(detok: FlowHiftDetokenizer, w: FlowWindow, prompt: int) -> slice:
    """The frames of the row's chunk within the row (after its prompt and context)."""
    r = detok.ratio
    return slice(r * (prompt + w.first - w.start), r * (prompt + w.end - w.start))


def _solve_group(detok, rows, members, z, mu, spks, cond, prompts) -> None:
    frames = [_chunk_frames(detok, w, prompts[i]) for w, i in zip(rows, members, strict=True)]
    z_new = torch.stack([z[i][:, f] for i, f in zip(members, frames, strict=True)])
    mu_new = torch.stack([mu[i][:, f] for i, f in zip(members, frames, strict=True)])
    cond_new = torch.stack([cond[i][:, f] for i, f in zip(members, frames, strict=True)])
    spks_new = torch.stack([spks[i] for i in members])
    caches = _stack([w.state.flow_cache for w in rows])
    mel, caches = solve_euler_cached(detok.flow, z_new, mu_new, spks_new, cond_new, caches)
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
