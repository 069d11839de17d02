"""The CUDA stream the LLM's steps run on: the highest priority the device has.

Why: the codec's jobs (CosyVoice 2's flow + HiFT: thousands of kernels a job) run beside the
LLM on streams of their own. At equal priority the GPU's block scheduler hands freed SMs to
whichever stream's blocks are waiting, so a decode step queues behind codec kernels and every
stream's next token waits (the H200 measured CosyVoice 2's step at batch 8 at 5.1 ms with a
codec job beside it, BENCHMARKS.md). A higher-priority stream gets SMs first as blocks finish;
the codec takes what the step leaves. The first-chunk lane sits between the two
(detok_threads.LANE_STREAM_PRIORITY), the steady codec job lowest.

Everything the engine thread puts on the device goes on this stream (steps, admissions, warm-up),
so its work stays in order without events; the first use waits once for what was queued before
on other streams (weights, KV cache, graph capture).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

# Lower is higher; torch clamps to the highest priority the device (and torch) offers.
LLM_STREAM_PRIORITY = -8


class LlmStream:
    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.stream = (
            torch.cuda.Stream(device, priority=LLM_STREAM_PRIORITY)
            if enabled and device.type == "cuda"
            else None
        )
        self._device = device
        self._synced = False

    def __call__(self) -> AbstractContextManager:
        """A context that makes this stream current for the engine thread (nothing on CPU)."""
        if self.stream is None:
            return nullcontext()
        if not self._synced:  # once: weights, KV and graphs made on other streams are ready
            torch.cuda.synchronize(self._device)
            self._synced = True
        return torch.cuda.stream(self.stream)

    @property
    def priority(self) -> int | None:
        return None if self.stream is None else self.stream.priority
