"""CUDA graphs for the depth stage of models whose tokens are rows (CSM, Moshi, voxgate-tiny).

A depth stage draws a frame's codebooks one after another, each a few small layers plus a
sampler: hundreds to thousands of tiny kernels a step (Moshi-7B: 8 codebooks × 6 layers, most
of a frame's ~8,000 launches; docs/benchmark-history.md), which leave the GPU idle while the
host launches them. Its shapes are fixed per batch size and its sampler never synchronises
with the host (engine/code_sampling.py), so the whole stage replays as one graph per bucket.

A graph fixes the sampler's kernels, so each bucket is captured for one `CodeSamplingPlan`:
sampled rows with a top-k threshold of at most `max_k` and no nucleus (what the models' own
defaults ask for; all-greedy steps replay the same graph: greedy rows take the argmax there
too). Steps outside that (a nucleus, a larger top-k, more rows than the largest bucket) run
eagerly. Padding rows are greedy and their codes are dropped.

`run_static` does what a replay does, eagerly, on the same static buffers: the CPU tests
check it against the eager stage, so the buffer handling is tested where no GPU is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from engine.code_sampling import CodeSamplingInputs, CodeSamplingPlan, DeviceCodeSampler
from engine.cuda_graphs import PerBucketGraphs, capture_per_bucket

log = logging.getLogger("voxgate.graphs")

DepthStage = Callable[[torch.Tensor, torch.Tensor, DeviceCodeSampler], torch.Tensor]


class DepthGraphs(PerBucketGraphs):
    def __init__(
        self,
        depth_stage: DepthStage,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        buckets: tuple[int, ...],
        max_k: int,
    ) -> None:
        self.depth_stage = depth_stage
        self.device = device
        self.buckets = tuple(sorted(buckets))
        self.max_batch = self.buckets[-1]
        self.plan = CodeSamplingPlan(any_random=True, nucleus=False, max_k=max_k)
        b = self.max_batch

        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(b, dtype=dtype, device=device)

        self._hidden = torch.zeros(b, hidden_size, dtype=dtype, device=device)
        self._first = zeros(torch.long)
        self._inputs = CodeSamplingInputs(
            greedy=zeros(torch.bool),
            temperature=torch.ones(b, dtype=torch.float32, device=device),
            top_k=zeros(torch.long),
            top_p=torch.ones(b, dtype=torch.float32, device=device),
            seeds=zeros(torch.long),
            steps=zeros(torch.long),
        )
        self._out: dict[int, torch.Tensor] = {}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def fits(self, n: int, plan: CodeSamplingPlan) -> bool:
        """Whether a step of n rows with this plan replays (else it runs eagerly)."""
        return (
            self.bucket_for(n) is not None
            and not plan.nucleus
            and (not plan.any_random or plan.max_k <= self.plan.max_k)
        )

    def _call(self, batch: int) -> torch.Tensor:
        x = self._inputs
        view = CodeSamplingInputs(
            x.greedy[:batch],
            x.temperature[:batch],
            x.top_k[:batch],
            x.top_p[:batch],
            x.seeds[:batch],
            x.steps[:batch],
        )
        sampler = DeviceCodeSampler(view, self.plan)
        return self.depth_stage(self._hidden[:batch], self._first[:batch], sampler)

    def _fill(
        self, hidden: torch.Tensor, first: torch.Tensor, inputs: CodeSamplingInputs | None
    ) -> int:
        n = hidden.shape[0]
        batch = self.bucket_for(n)
        if batch is None:
            raise ValueError(f"no depth graph bucket for a batch of {n}")
        self._hidden[:n].copy_(hidden, non_blocking=True)
        self._first[:n].copy_(first, non_blocking=True)
        x = self._inputs
        if inputs is None:  # an all-greedy step
            x.greedy[:n].fill_(True)
        else:
            for static, value in zip(
                (x.greedy, x.temperature, x.top_k, x.top_p, x.seeds, x.steps),
                (
                    inputs.greedy,
                    inputs.temperature,
                    inputs.top_k,
                    inputs.top_p,
                    inputs.seeds,
                    inputs.steps,
                ),
                strict=True,
            ):
                static[:n].copy_(value, non_blocking=True)
        x.greedy[n:batch].fill_(True)  # padding rows: greedy, their codes dropped
        self._first[n:batch].zero_()
        return batch

    @torch.inference_mode()
    def capture(self) -> None:
        """Largest bucket first: warm-up there allocates the stage's own buffers (the depth
        attention's frame k/v) outside any graph, and smaller graphs reuse the pool."""
        self._graphs, self._out = capture_per_bucket(self.buckets, self._call, self.device)
        log.info("captured depth-stage graphs for batch sizes %s", list(self.buckets))

    def run(
        self, hidden: torch.Tensor, first: torch.Tensor, inputs: CodeSamplingInputs | None
    ) -> torch.Tensor:
        """The stage's rows [n, W] for hidden [n, H] and first tokens [n], from a replay; a
        view of the graph's output, valid until the next replay (the caller copies it)."""
        n = hidden.shape[0]
        batch = self._fill(hidden, first, inputs)
        self._graphs[batch].replay()
        return self._out[batch][:n]

    def run_static(
        self, hidden: torch.Tensor, first: torch.Tensor, inputs: CodeSamplingInputs | None
    ) -> torch.Tensor:
        """What `run` computes, run eagerly on the static buffers (any device)."""
        n = hidden.shape[0]
        return self._call(self._fill(hidden, first, inputs))[:n]
