"""Batching streaming codec calls: streams with the same number of pending frames decode in
one call (`decode_by_length`), padded to a bucket on CUDA. VoxCodec's per-stream state (a list
of per-layer tensors) is stacked on a batch dimension for a call and split back afterwards;
Mimi's halves keep theirs in place instead (models/codecs/slot_states.py), so their calls can
be CUDA graphs.

On CUDA the streaming Mimi halves pad each call's batch up to a bucket (`padded_batch`):
cuDNN builds an execution plan the first time it sees a convolution shape (about 0.3 s for a
Mimi pass on an H200), so a batch size never seen before would stall every session of that
tick by a frame or more. With buckets there are nine shapes, all run once at start-up
(`warm_up_batches`). The GPU is launch-bound at these sizes, so padding costs little there; on
the CPU it would cost compute and there is no plan to build, so CPU calls are not padded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch


class StatefulStream(Protocol):
    state: list[torch.Tensor] | None  # per-layer cache, None before the first call


class PendingStream(StatefulStream, Protocol):
    pending: list  # frames received and not yet decoded


# Batch sizes the streaming codecs pad to on CUDA (beyond the last: multiples of it).
PAD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def padded_batch(n: int) -> int:
    """The smallest bucket that holds `n` streams."""
    for bucket in PAD_BUCKETS:
        if bucket >= n:
            return bucket
    step = PAD_BUCKETS[-1]
    return -(-n // step) * step


def buckets_up_to(max_batch: int) -> list[int]:
    """Every batch size padded calls of up to `max_batch` streams can take."""
    top = padded_batch(max_batch)
    return [b for b in PAD_BUCKETS if b < top] + [top]


def decode_by_length(
    streams: Sequence[PendingStream], decode_group: Callable[[list], list[np.ndarray]]
) -> list[np.ndarray]:
    """decode_group(streams with equal pending lengths) for each such group; returns every
    stream's audio in order (empty where nothing was pending)."""
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(streams):
        if s.pending:
            groups.setdefault(len(s.pending), []).append(i)
    out = [np.zeros(0, np.float32) for _ in streams]
    for rows in groups.values():
        for i, audio in zip(rows, decode_group([streams[i] for i in rows]), strict=True):
            out[i] = audio
    return out


def stack_states(group: Sequence[StatefulStream], fresh: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-layer state tensors [B, ...] of the group (a fresh state for new streams)."""
    return [torch.stack(parts) for parts in zip(*[s.state or fresh for s in group], strict=True)]


def split_states(group: Sequence[StatefulStream], state: list[torch.Tensor]) -> None:
    for i, s in enumerate(group):
        s.state = [t[i] for t in state]
