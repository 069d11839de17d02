"""GPU time of a callable replayed from a CUDA graph, for the microbenchmarks here (GPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def replay_us(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """fn() run thrice (compiles, allocations), captured in a CUDA graph and replayed `reps`
    times between CUDA events: (µs a replay, what the captured call returned, which each
    replay rewrites)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000 / reps, out
