"""The engine's graph sets as the CPU runs them (no CUDA graphs there), for tests of the
paths that replay them: a stand-in for the decode graph, the real sampling graphs run by their
eager twin, the real prompt graphs on their padded buffers, and a codec's CallableGraphs."""

from __future__ import annotations

import torch

from engine.host_ops import outputs_like


class EagerGraphs:
    """engine.cuda_graphs.CallableGraphs' contract on the CPU (a codec's graphs): captured
    keys, `run` calls the function on the (padded) inputs it is given, as a replay would, and
    records each key it ran (`shapes`); the blocks named for compiling are kept (`regions`)."""

    def __init__(self) -> None:
        self.keys: set = set()
        self.shapes: list[tuple] = []
        self.paces = 0
        self.regions: list[torch.nn.Module] = []

    def __contains__(self, key) -> bool:
        return key in self.keys

    def capture(self, key, fn, inputs, borrow=()):
        self.keys.add(key)
        return outputs_like(fn, inputs)

    def run(self, key, fn, inputs):
        self.shapes.append(key)
        return fn(*inputs)

    def pace(self) -> None:
        self.paces += 1

    def compile_regions(self, modules) -> None:
        self.regions = list(modules)


class EagerDecodeGraphs:
    """Stands in for the captured decode graph on the CPU: the same forward, run eagerly, its
    hidden states left in the buffer the sampling graph reads, as a replay leaves them."""

    max_batch = 64

    def __init__(self, worker) -> None:
        self.worker = worker
        self.hidden_buffer = torch.zeros(self.max_batch, worker.model.shape.hidden_size)

    def run(self, input_ids, positions, layout, prepare=None):
        (prepare or self.worker.attn.prepare)(layout)
        hidden = self.worker.model.forward(
            input_ids, torch.tensor(positions, dtype=torch.long), self.worker.attn
        )
        self.hidden_buffer[: len(hidden)] = hidden
        return hidden


def with_cpu_graphs(worker, prompt_buckets: tuple[int, ...] = (16, 32, 64)) -> None:
    """The worker's three graph sets as the CPU runs them: the decode stand-in above, the real
    sampling graphs replayed by their eager twin (`run_static`, the same static buffers), and
    the real prompt graphs, which run their padded buffers eagerly where nothing is captured."""
    from engine.prompt_graphs import PromptAttention, PromptGraphs
    from engine.sampling_graphs import SamplingGraphs

    model, cpu = worker.model, torch.device("cpu")
    worker.graphs = EagerDecodeGraphs(worker)
    sampling = SamplingGraphs(
        model.device_candidates, worker.sampler, worker.graphs.hidden_buffer, (1, 2, 4, 8), cpu
    )
    sampling.run = sampling.run_static
    worker.sampling_graphs = sampling
    attn = PromptAttention(worker.cache, model.shape.num_q_heads, max_tokens=prompt_buckets[-1])
    worker.prompt_graphs = PromptGraphs(
        model.forward, attn, model.shape.hidden_size, model.shape.dtype, cpu,
        worker.cache.block_size, buckets=prompt_buckets,
    )  # fmt: skip


def count_graphed_steps(worker) -> list[int]:
    """Record, for every step from now on that ran from graphs with prompts in it
    (Worker._launch_graphed), how many requests it sampled."""
    sampled: list[int] = []
    launch_graphed = worker._launch_graphed

    def counted(chunks, block_size, previous):
        step = launch_graphed(chunks, block_size, previous)
        if step is not None:
            sampled.append(len(step.requests))
        return step

    worker._launch_graphed = counted
    return sampled
