"""The engine's graph sets as the CPU runs them (no CUDA graphs there), for tests of the
paths that replay them: a stand-in for the decode graph, the real sampling graphs run by their
eager twin, the real prompt graphs on their padded buffers, and a codec's CallableGraphs."""

from __future__ import annotations

from typing import ClassVar

import torch

from engine.host_ops import CountedGraphs, HostOpCounter, outputs_like


class DeferredCaptures:
    """Captures traced when first replayed, for CPU stand-ins of CallableGraphs whose tests
    replay a few of a codec's buckets: tracing every bucket's functions (outputs_like) is most
    of such a test's time, tens of seconds for a flow + HiFT codec. A key's trace is the one its
    capture would have made, with the inputs the capture was given (so a host read in it still
    fails), only made when the key first runs; keys never run are never traced. The keys
    themselves are recorded by the caller at capture, so which buckets exist is unchanged.

    The production code unpacks a capture's outputs to feed them to the next capture (the
    flow's prep graph's outputs are its Euler step's inputs), so `capture` returns a tuple as
    long as the function's outputs (learnt from the first capture of it in the session, which
    is traced at once) of placeholders for the outputs not traced yet; a later trace that takes
    one as input first traces the capture that makes it."""

    # function → how many outputs it returns (None: one tensor), for every instance: how many
    # is the function's own, whatever the bucket.
    arity: ClassVar[dict] = {}

    def __init__(self) -> None:
        self.pending: dict = {}  # key → (fn, inputs, inference mode), not traced yet
        self.outputs: dict = {}  # key → its traced outputs (zeros shaped as fn's)

    def capture(self, key, fn, inputs):
        self.pending[key] = (fn, list(inputs), torch.is_inference_mode_enabled())
        func = getattr(fn, "__func__", fn)  # a bound method: one arity for every instance
        if func not in self.arity:
            out = self.outputs_of(key)
            self.arity[func] = len(out) if isinstance(out, tuple | list) else None
            return out
        n = self.arity[func]
        if n is None:
            return _Untraced(self, key, None)
        return tuple(_Untraced(self, key, i) for i in range(n))

    def outputs_of(self, key):
        """The key's traced outputs, tracing it now if it is pending."""
        if key in self.pending:
            fn, inputs, inference = self.pending.pop(key)
            inputs = [x.traced() if isinstance(x, _Untraced) else x for x in inputs]
            with torch.inference_mode(inference):
                self.outputs[key] = outputs_like(fn, inputs)
        return self.outputs[key]


class _Untraced:
    """Output `index` (None: the only one) of a capture that DeferredCaptures has not traced."""

    __slots__ = ("captures", "index", "key")

    def __init__(self, captures: DeferredCaptures, key, index: int | None) -> None:
        self.captures, self.key, self.index = captures, key, index

    def traced(self) -> torch.Tensor:
        out = self.captures.outputs_of(self.key)
        return out if self.index is None else out[self.index]


class EagerGraphs:
    """engine.cuda_graphs.CallableGraphs' contract on the CPU (a codec's graphs): captured
    keys, `run` calls the function on the (padded) inputs it is given, as a replay would, and
    records each key it ran (`shapes`); the blocks named for compiling are kept (`regions`).
    deferred=True traces a capture only when its key first runs (DeferredCaptures)."""

    def __init__(self, deferred: bool = False) -> None:
        self.keys: set = set()
        self.shapes: list[tuple] = []
        self.paces = 0
        self.regions: list[torch.nn.Module] = []
        self.deferred = DeferredCaptures() if deferred else None

    def __contains__(self, key) -> bool:
        return key in self.keys

    def capture(self, key, fn, inputs, borrow=()):
        self.keys.add(key)
        if self.deferred is not None:
            return self.deferred.capture(key, fn, inputs)
        return outputs_like(fn, inputs)

    def run(self, key, fn, inputs):
        if self.deferred is not None and key in self.keys:
            self.deferred.outputs_of(key)  # the capture's trace, made on the first replay
        self.shapes.append(key)
        return fn(*inputs)

    def pace(self) -> None:
        self.paces += 1

    def compile_regions(self, modules) -> None:
        self.regions = list(modules)


class DeferredCountedGraphs(CountedGraphs):
    """engine.host_ops.CountedGraphs' CPU stand-in (graphs=None: a run counts its copies and
    one replay, and nothing of what it replays), its captures traced when first run
    (DeferredCaptures), uncounted as CountedGraphs' captures are."""

    def __init__(self, counter: HostOpCounter) -> None:
        super().__init__(counter)
        self.deferred = DeferredCaptures()

    def capture(self, key, fn, inputs, borrow=()):
        self.keys.add(key)
        self.borrowed[key] = len(borrow)
        with self.counter.paused():
            return self.deferred.capture(key, fn, inputs)

    def run(self, key, fn, inputs):
        if key in self.keys:
            with self.counter.paused():
                self.deferred.outputs_of(key)
        return super().run(key, fn, inputs)


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


def with_cpu_row_graphs(worker, prompt_buckets: tuple[int, ...] = (16, 32, 64)) -> None:
    """A row model's graph sets as the CPU runs them (models that sample eagerly beside their
    graphs: SpeechModel.prompt_graphs_sample_eagerly): the decode stand-in, the real prompt
    graphs on rows of ids, and the real depth graphs replayed by their eager twin
    (`run_static`). No sampling graphs: codebook 0 is drawn by the eager sampler."""
    from engine.depth_graphs import DepthGraphs
    from engine.prompt_graphs import PromptAttention, PromptGraphs

    model, cpu = worker.model, torch.device("cpu")
    shape = model.shape
    worker.graphs = EagerDecodeGraphs(worker)
    attn = PromptAttention(worker.cache, shape.num_q_heads, max_tokens=prompt_buckets[-1])
    worker.prompt_graphs = PromptGraphs(
        model.forward, attn, shape.hidden_size, shape.dtype, cpu, worker.cache.block_size,
        buckets=prompt_buckets, row_width=worker.row_width,
    )  # fmt: skip
    depth = DepthGraphs(model.depth_stage, shape.hidden_size, shape.dtype, cpu, (1, 2, 4, 8), 256)
    depth.run = depth.run_static
    worker.depth_graphs = depth


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
