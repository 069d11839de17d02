"""Count the ATen ops the host dispatches: on a GPU each is a kernel launch (or a copy, or an
allocation) that the launching thread pays for with the GIL held, while a replayed CUDA graph
is one launch however many kernels it holds. For tests and benches of host cost
(bench/detok_job_ops.py): a job's count says how much launch work it leaves to the host.

    with HostOpCounter() as ops:
        detok.decode(states, final)
    ops.total, ops.counts.most_common(5), ops.device_reads  # .item(), int(t)

`CountedGraphs` wraps the engine's CallableGraphs (or, with none, stands in for it on the CPU)
so that a replay counts as one op and what it replays is not counted."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

REPLAY = "graph_replay"


class HostOpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self._paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._paused:
            self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def device_reads(self) -> int:
        """Scalars read back to the host (.item(), int(t), float(t)): each waits for the
        device. (.tolist() and .numpy() bypass the dispatcher and are not counted.)"""
        return self.counts["item"] + self.counts["_local_scalar_dense"]


def outputs_like(fn: Callable, inputs: list[torch.Tensor]):
    """Zeros shaped as fn(*inputs)'s outputs, traced on fake tensors instead of computed: what a
    CPU stand-in for CallableGraphs returns from `capture` (a real capture's output buffers are
    overwritten by every replay, so only their shapes matter; computing them ran the flow at
    every bucket's full size, minutes of CPU in the tests). Captured functions make no host
    reads, so they trace."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        out = fn(*inputs)
    return tree_map(
        lambda t: (
            torch.zeros(t.shape, dtype=t.dtype, device=t.device)
            if isinstance(t, torch.Tensor)
            else t
        ),
        out,
    )


class CountedGraphs:
    """CallableGraphs' contract (`capture`, `in`, `run`, `pace`, `fused`) around `graphs`; with graphs=None a
    CPU stand-in whose captures only record the key and whose `run` calls the function on the
    padded inputs (as a replay computes). Either way a run of a captured key counts its copies
    into the graph's inputs and one replay on `counter`, and nothing of what it replays."""

    def __init__(self, counter: HostOpCounter, graphs=None) -> None:
        self.counter = counter
        self.graphs = graphs
        self.keys: set = set()
        self.borrowed: dict[object, int] = {}  # inputs a run copies nothing into, by key

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def capture(
        self, key: object, fn: Callable, inputs: list[torch.Tensor], borrow: tuple[int, ...] = ()
    ):
        self.keys.add(key)
        self.borrowed[key] = len(borrow)
        if self.graphs is not None:
            return self.graphs.capture(key, fn, inputs, borrow)
        with self.counter.paused():
            return outputs_like(fn, inputs)

    def pace(self) -> None:
        if self.graphs is not None:
            self.graphs.pace()

    def compile_regions(self, modules) -> None:
        if self.graphs is not None:
            self.graphs.compile_regions(modules)

    def run(self, key: object, fn: Callable, inputs: list[torch.Tensor]):
        if key not in self.keys:
            return fn(*inputs)
        if self.graphs is not None:  # the real copies are counted; the replay is no ATen op
            self.counter.counts[REPLAY] += 1
            return self.graphs.run(key, fn, inputs)
        self.counter.counts["copy_"] += len(inputs) - self.borrowed[key]
        self.counter.counts[REPLAY] += 1
        with self.counter.paused():
            return fn(*inputs)
