"""CUDA graphs for a decode step's head and sampling (models with `device_candidates`).

The decode graph (engine/cuda_graphs.py) replays the backbone in one launch, but the head and
the sampler after it are ~100 small eager launches a step: temperature, top-k/top-p sort,
the counter-based noise hash, repetition-aware redraws, the presence and recent-window
updates. Under load the codec's kernels fill the device's queues and each eager launch can
wait for room, so those launches, not the GPU's work, make most of CosyVoice 2's LLM step
(its host time under load is all launch; the wait for its tokens is ~0).

Here each decode bucket's head + `Sampler.sample_fixed` is one graph. Its input is the decode
graph's own output buffer (no copy) and one step's per-row settings, packed on the host into
two pinned buffers and uploaded by two asynchronous copies. A step replays only when every
row samples and its drawn rows use the nucleus path (some top_p < 1, as CosyVoice 2's
defaults) or none is drawn, so the tokens are the eager sampler's exactly; other steps, and
any step after the sampler's tables were reallocated, sample eagerly.

`run_static` does what a replay does, eagerly, on the same static buffers: the CPU tests check
it against the eager sampler, so the buffer handling is tested where no GPU is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import torch

from engine.cuda_graphs import PerBucketGraphs, capture_per_bucket
from engine.sampling import FixedSampling, Sampler, SamplingRow
from models.base import Candidates
from models.device_util import StagingRing

log = logging.getLogger("voxgate.graphs")

# (hidden, allow_stop, steps: each row's output position) → candidates
Head = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Candidates]
# Columns of the packed integer inputs: FixedSampling.INTS, then whether the row may stop.
_TABLE_ROW, _GREEDY = FixedSampling.INTS.index("table_rows"), FixedSampling.INTS.index("greedy")
_STEPS = FixedSampling.INTS.index("steps")
_ALLOW_STOP = len(FixedSampling.INTS)


class SamplingGraphs(PerBucketGraphs):
    LIVE_ROWS = 512  # at least this many live requests' sampler rows are reserved

    def __init__(
        self,
        head: Head,
        sampler: Sampler,
        hidden: torch.Tensor,
        buckets: tuple[int, ...],
        device: torch.device,
    ) -> None:
        """`hidden` [B, H]: the buffer the decode step leaves its hidden states in (the decode
        graphs' output), read by every bucket's graph in place."""
        self.head = head
        self.sampler = sampler
        self.buckets = tuple(sorted(buckets))
        self.max_batch = self.buckets[-1]
        self.device = device
        # Requests hold a table row from arrival until their audio is out, so more of them
        # than a batch are live; past this many the tables regrow and steps sample eagerly.
        sampler.reserve(max(4 * self.max_batch, self.LIVE_ROWS))
        self.generation = sampler.generation
        self._stale_told = False
        b = self.max_batch
        self._hidden = hidden
        self._ints = torch.zeros(b, len(FixedSampling.INTS) + 1, dtype=torch.long, device=device)
        self._floats = torch.ones(b, len(FixedSampling.FLOATS), dtype=torch.float32, device=device)
        # Pinned host staging: with async scheduling a step is filled while the previous
        # step's upload may still be queued (models/device_util.StagingRing).
        self._ints_staging = StagingRing(self._ints.numel(), torch.long, device)
        self._floats_staging = StagingRing(self._floats.numel(), torch.float32, device)
        self._out: dict[int, torch.Tensor] = {}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.replays = 0

    def fits(self, n: int, rows: list[SamplingRow]) -> bool:
        """Whether a decode step of n rows, all sampling, replays (else it samples eagerly)."""
        if self.sampler.generation != self.generation:
            if not self._stale_told:
                log.warning(
                    "more live requests than the sampler rows the sampling graphs captured "
                    "(%d): steps sample eagerly from now on",
                    self.sampler.capacity - 1,
                )
                self._stale_told = True
            return False
        if self.bucket_for(n) is None:
            return False
        drawn = [r.params for r in rows if not r.params.greedy]
        return not drawn or any(p.top_p < 1.0 for p in drawn)

    def _inputs(self, batch: int) -> FixedSampling:
        ints, floats = self._ints[:batch], self._floats[:batch]
        cols = {name: ints[:, i] for i, name in enumerate(FixedSampling.INTS)}
        cols["greedy"] = cols["greedy"] != 0
        cols.update({name: floats[:, i] for i, name in enumerate(FixedSampling.FLOATS)})
        return FixedSampling(**{f: cols[f] for f in FixedSampling.__dataclass_fields__})

    def _call(self, batch: int) -> torch.Tensor:
        allow_stop = self._ints[:batch, _ALLOW_STOP] != 0
        cands = self.head(self._hidden[:batch], allow_stop, self._ints[:batch, _STEPS])
        return self.sampler.sample_fixed(cands, self._inputs(batch))

    def _fill(self, rows: list[SamplingRow], allow_stop: list[bool]) -> int:
        n = len(rows)
        batch = self.bucket_for(n)
        if batch is None:
            raise ValueError(f"no sampling graph bucket for a batch of {n}")
        with (
            self._ints_staging.fill(self._ints[:batch]) as ints,
            self._floats_staging.fill(self._floats[:batch]) as floats,
        ):
            self._pack(rows, allow_stop, ints, floats)
        return batch

    def _pack(
        self,
        rows: list[SamplingRow],
        allow_stop: list[bool],
        ints: np.ndarray,
        floats: np.ndarray,
    ) -> None:
        """The rows' settings into a bucket's host arrays (ints [B, INTS + 1], floats
        [B, FLOATS]), padding rows after them."""
        n, sampler = len(rows), self.sampler
        ints[:] = 0  # padding rows: greedy, on the scratch row, free to stop
        ints[:, _TABLE_ROW] = sampler.scratch_row
        ints[:, _GREEDY] = ints[:, _ALLOW_STOP] = 1
        floats[:] = 1.0
        # Each row's settings were packed at admission (Sampler.packed_ints / packed_floats);
        # only its step and whether it may stop change from step to step.
        table_rows = sampler.table_rows([r.request_id for r in rows])
        ints[:n, :_ALLOW_STOP] = sampler.packed_ints[table_rows]
        ints[:n, _STEPS] = [r.step for r in rows]
        ints[:n, _ALLOW_STOP] = allow_stop
        floats[:n] = sampler.packed_floats[table_rows]

    @torch.inference_mode()
    def capture(self) -> None:
        """Largest bucket first, so smaller graphs reuse its pool memory."""
        self._ints[:, _TABLE_ROW] = self.sampler.scratch_row  # warm-up writes the scratch row
        self._graphs, self._out = capture_per_bucket(self.buckets, self._call, self.device)
        log.info("captured head + sampling graphs for batch sizes %s", list(self.buckets))

    def run(self, rows: list[SamplingRow], allow_stop: list[bool]) -> torch.Tensor:
        """The step's tokens [n] for the n rows whose hidden states the decode step just left
        in the hidden buffer's first n rows; a view of the graph's output, valid until the
        next replay of the same bucket (the caller copies it to the host at once)."""
        batch = self._fill(rows, allow_stop)
        self._graphs[batch].replay()
        self.replays += 1
        return self._out[batch][: len(rows)]

    def run_static(self, rows: list[SamplingRow], allow_stop: list[bool]) -> torch.Tensor:
        """What `run` computes, run eagerly on the static buffers (any device)."""
        return self._call(self._fill(rows, allow_stop))[: len(rows)]
