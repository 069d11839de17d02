"""Per-stream codec state kept in place, one row a stream: what lets a streaming codec's
call be a CUDA graph, and costs two kernels a state tensor however many streams it serves.

A streaming codec's state (Mimi's: a cached tail per causal convolution, the windowed
transformer's keys, values and positions) is a list of tensors. Kept per stream and stacked for
each call (models/codecs/stream_batching.py), a call of B streams builds B Python objects per
state tensor twice, and the stacked tensors are new every call, so no graph can capture it.
Here each state tensor lives in one buffer [capacity, ...]; a stream owns a row (its slot) from
its first call until it is garbage; a call gathers its streams' rows (`index_select`) and
writes the new state back (`index_copy_`), both inside the call's graph when it has one.

Slot 0 is scratch: the padding rows of a bucketed call read and write it, and nothing reads
what they leave there (every layer of the codecs is row-wise across the batch). A new stream's
row is reset to the fresh state when it is bound. Buffers grow (doubling) when every slot is
taken; that reallocates them, so a graph captured before reads stale buffers: `generation`
says when, and the codec stops replaying (`size_for` beforehand avoids it).

Two codec contexts on two threads and CUDA streams may share one StateSlots (Qwen3-TTS's
first-chunk lane and its steady codec: a stream's row is then read and written by whichever
context runs its chunk, never by both at once). Every read and write of the buffers is
enqueued under the lock, and growth waits for the device before copying the rows and after,
so no thread's work lands in a buffer being replaced or reads one half copied.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Sequence
from typing import Protocol

import torch

SCRATCH = 0  # the slot padding rows read and write


class SlottedStream(Protocol):
    slot: int | None  # its row in the codec's StateSlots; None before its first call


class StateSlots:
    def __init__(self, fresh: Sequence[torch.Tensor], capacity: int = 8) -> None:
        """`fresh`: a new stream's state, one tensor per state entry, without the batch
        dimension. `capacity`: rows to start with, scratch included."""
        self._fresh = [t.detach().clone() for t in fresh]
        self._lock = threading.Lock()  # two codec contexts' threads (module docstring)
        # Slots of streams gone, handed back by their finalizers: a finalizer may run on any
        # thread, inside a locked section too (a garbage collection there), so it only queues
        # the slot (SimpleQueue.put is reentrant) and the lock's holders take it back.
        self._released: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.buffers: list[torch.Tensor] = []
        self._free: list[int] = []
        self.generation = 0  # bumped whenever the buffers are reallocated
        self._allocate(max(2, capacity))

    @property
    def capacity(self) -> int:
        return self.buffers[0].shape[0]

    def size_for(self, streams: int) -> None:
        """Make room for `streams` streams at once (plus scratch) now, before graphs capture
        the buffers, so that serving up to that many never reallocates them."""
        with self._lock:
            if streams + 1 > self.capacity:
                self._allocate(streams + 1)

    def bind(self, stream: SlottedStream) -> int:
        """The stream's slot, taking a fresh one on its first call; the slot goes back when
        the stream object is garbage (a finalizer, so no caller has to remember to free it)."""
        if stream.slot is None:
            with self._lock:
                self._take_back_released()
                if not self._free:
                    self._allocate(2 * self.capacity)
                slot = self._free.pop()
                for buffer, fresh in zip(self.buffers, self._fresh, strict=True):
                    buffer[slot].copy_(fresh)
            stream.slot = slot
            weakref.finalize(stream, self._release, slot)
        return stream.slot

    def gather(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """The state of the streams at `rows` (int64 [B] on the buffers' device), [B, ...]."""
        with self._lock:
            return [buffer.index_select(0, rows) for buffer in self.buffers]

    def gather_into(self, rows: torch.Tensor, out: Sequence[torch.Tensor]) -> None:
        """`gather` into given tensors (a CUDA graph's inputs)."""
        with self._lock:
            for buffer, target in zip(self.buffers, out, strict=True):
                torch.index_select(buffer, 0, rows, out=target)

    def scatter(self, rows: torch.Tensor, state: Sequence[torch.Tensor]) -> None:
        """Write a call's new state [B, ...] back to the streams' rows."""
        with self._lock:
            for buffer, new in zip(self.buffers, state, strict=True):
                buffer.index_copy_(0, rows, new.to(buffer.dtype))

    def read_row(self, slot: int) -> list[torch.Tensor]:
        """A copy of one slot's state."""
        with self._lock:
            return [buffer[slot].clone() for buffer in self.buffers]

    def write_row(self, slot: int, state: Sequence[torch.Tensor]) -> None:
        """Set one slot's state (a copy of `state`)."""
        with self._lock:
            for buffer, value in zip(self.buffers, state, strict=True):
                buffer[slot].copy_(value)

    @property
    def in_use(self) -> int:
        """Streams holding a slot now."""
        with self._lock:
            self._take_back_released()
            return self.capacity - 1 - len(self._free)

    def _release(self, slot: int) -> None:
        self._released.put(slot)

    def _take_back_released(self) -> None:
        """Under the lock: the slots of streams gone since, free again."""
        while True:
            try:
                self._free.append(self._released.get_nowait())
            except queue.Empty:
                return

    def _allocate(self, capacity: int) -> None:
        """Grow to `capacity` rows, keeping the rows in use; new rows are free."""
        old = self.capacity if self.buffers else 0
        on_cuda = old and self.buffers[0].is_cuda
        if on_cuda:  # another thread's gathers and scatters, enqueued on its stream, land first
            torch.cuda.synchronize(self.buffers[0].device)
        grown = []
        for i, fresh in enumerate(self._fresh):
            buffer = fresh.unsqueeze(0).repeat(capacity, *([1] * fresh.dim()))
            if old:
                buffer[:old] = self.buffers[i]
            grown.append(buffer)
        if on_cuda:  # the copies are done before another stream writes the new buffers
            torch.cuda.synchronize(self.buffers[0].device)
        self.buffers = grown
        # Lowest rows first: pop() takes from the end.
        self._free = sorted(set(self._free) | set(range(max(old, 1), capacity)), reverse=True)
        self.generation += 1


class SlottedCalls:
    """A streaming codec half's calls on its StateSlots: replayed from the engine's CUDA graphs
    (engine/cuda_graphs.py CallableGraphs) once `warm` has captured them, run eagerly before,
    without graphs, for shapes never captured, and once the slots' buffers were reallocated
    (their graphs would read the old ones)."""

    def __init__(self, slots: StateSlots) -> None:
        self.slots = slots
        self.graphs = None  # CallableGraphs, once the engine enabled them
        self._captured = -1  # the slots' generation the graphs were captured against

    def enable(self, graphs) -> None:
        self.graphs = graphs

    def warm(self, key: object, fn, inputs: list[torch.Tensor]) -> None:
        """At start-up: capture the call for `key` when graphs are enabled, else run it once
        (cuDNN's plans for its shapes); `warmed` ends the start-up."""
        if self.graphs is None:
            fn(*inputs)
        else:
            self.graphs.capture(key, fn, inputs)

    def warmed(self) -> None:
        self._captured = self.slots.generation

    def run(self, key: object, fn, inputs: list[torch.Tensor]):
        if self.graphs is not None and self._captured == self.slots.generation:
            return self.graphs.run(key, fn, inputs)
        return fn(*inputs)
