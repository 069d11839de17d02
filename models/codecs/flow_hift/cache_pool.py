"""Streams' cached estimator context in one fixed pool, so a chunk's solve can replay a CUDA graph.

Each stream owns a slot of the pool: per Euler step, attention layer and CFG half, the keys and
values of up to `prompt_cap` voice-prompt frames and of its last `ring` generated frames (a
ring: the estimator has no positional encoding, so key order is free), a validity mask, and its
convolutions' history. `FlowCachePool.solve` reads the rows' slots (one gather per layer and pass),
runs static_cache's fixed-shape solve and writes the chunk's keys and values (one scatter per
layer and pass, as soon as the layer has read its context) and history back into the slots,
all on the device with indices the host computed: a job's shapes
depend only on its number of rows, so one graph per row bucket serves every job.

Frame column `cap` (= prompt_cap + ring) of every slot is scratch: a row's padding frames are
written there and it is never valid. Slot `slots` is the scratch slot of padding rows.

Memory: per slot S x A x 2 (CFG) x 2 (K, V) x (cap + 1) x D elements; the real configuration
(S 10, A 56, D 512) in bf16 with cap 250 is ~287 MB a slot.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch

from models.codecs.flow_hift.static_cache import ConvLayout, attention_shape, static_cached_solve


@dataclass
class PoolSlot:
    """A stream's slot and where its next generated frames go (host bookkeeping)."""

    index: int  # the voice prompt's frames are kept in its first columns
    generated: int = 0  # generated frames written so far (the ring holds the last `ring`)
    entered: bool = False  # the voice prompt's frames are in the slot
    released: bool = False  # back in the pool (the stream ended, or was dropped)


class PoolContext:
    """static_cache's context read from the rows' slots: CFG's conditional rows are the slots'
    half 0, the unconditional rows half 1."""

    def __init__(self, pool: FlowCachePool, slots: torch.Tensor, columns: torch.Tensor) -> None:
        self.pool, self.slots, self.columns = pool, slots, columns
        self._halves = torch.arange(2, device=slots.device)[:, None, None]
        valid = pool.valid[slots]  # [R, cap + 1]
        self.valid = torch.cat([valid, valid])
        conv = pool.convs[slots]  # [R, S, 2, W]
        self._conv = torch.cat([conv[:, :, 0], conv[:, :, 1]]).transpose(0, 1)  # [S, 2R, W]

    def _rows(self, table: torch.Tensor, step: int, layer: int) -> torch.Tensor:
        rows = table[self.slots, step, layer]  # [R, 2, cap + 1, D]
        return torch.cat([rows[:, 0], rows[:, 1]])

    def keys(self, step: int, layer: int) -> torch.Tensor:
        return self._rows(self.pool.keys, step, layer)

    def values(self, step: int, layer: int) -> torch.Tensor:
        return self._rows(self.pool.values, step, layer)

    def conv(self, step: int) -> torch.Tensor:
        return self._conv[step]

    def keep(self, step: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write the chunk's keys and values [2R, T, D] into the rows' slots at (step, layer):
        half h of row r at the columns the host chose (`columns` [R, T]; padding frames go to
        the scratch column)."""
        r = self.slots.shape[0]
        index = (self.slots[None, :, None], self._halves, self.columns[None])
        self.pool.keys[:, step, layer].index_put_(index, k.view(2, r, *k.shape[1:]))
        self.pool.values[:, step, layer].index_put_(index, v.view(2, r, *v.shape[1:]))


class FlowCachePool:
    def __init__(
        self,
        flow,
        slots: int,
        prompt_cap: int,
        ring: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        estimator = flow.decoder.estimator
        self.flow = flow
        self.layout = ConvLayout.of(estimator)
        layers, width = attention_shape(estimator)
        steps = flow.cfg.n_timesteps
        self.prompt_cap, self.ring = prompt_cap, ring
        self.cap = prompt_cap + ring
        self.slots = slots
        shape = (slots + 1, steps, layers, 2, self.cap + 1, width)
        need = 2 * math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        if device.type == "cuda" and need > torch.cuda.mem_get_info(device)[0]:
            raise ValueError(
                f"--flow-cache-slots {slots} needs {need / 2**30:.1f} GiB for the flow's cached "
                f"context (~{need / (slots + 1) / 2**20:.0f} MiB a stream) and the GPU has "
                f"{torch.cuda.mem_get_info(device)[0] / 2**30:.1f} GiB free: use fewer slots"
            )
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.convs = torch.zeros(slots + 1, steps, 2, self.layout.width, device=device, dtype=dtype)
        self.valid = torch.zeros(slots + 1, self.cap + 1, dtype=torch.bool, device=device)
        self._free = list(range(slots - 1, -1, -1))
        self._lock = threading.Lock()  # slots come back from whichever thread drops a stream

    @property
    def scratch(self) -> int:
        return self.slots

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def alloc(self, prompt_frames: int) -> PoolSlot | None:
        """A cleared slot for a stream with `prompt_frames` of voice prompt; None when the pool
        is full or the prompt does not fit (the stream then runs the eager cached path)."""
        if prompt_frames > self.prompt_cap:
            return None
        with self._lock:
            if not self._free:
                return None
            index = self._free.pop()
        self.valid[index] = False
        self.convs[index] = 0  # the causal convolutions' zero padding before the first frame
        return PoolSlot(index)

    def release(self, slot: PoolSlot) -> None:
        """Give the slot back, once: when its stream's last chunk is solved, or when the stream
        is dropped (cancelled) without one."""
        with self._lock:
            if not slot.released:
                slot.released = True
                self._free.append(slot.index)

    def take_positions(self, slot: PoolSlot, n: int, width: int) -> list[int]:
        """Columns for a chunk's n real frames (then width - n padding frames, to the scratch
        column) in the ring after the prompt; advances the slot's ring."""
        real = [self.prompt_cap + (slot.generated + j) % self.ring for j in range(n)]
        slot.generated += n
        return real + [self.cap] * (width - n)

    def solve(
        self,
        z: torch.Tensor,
        mu: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        ints: torch.Tensor,
    ) -> torch.Tensor:
        """One chunk per row over the rows' slots, then the chunk's context written into
        them. z, mu, cond [R, M, T]; spks [R, M]; ints [R, T + 2] long: each row's real frames,
        its slot, then the column each of its T frames goes to. → mel [R, M, T] float32.
        Fixed shapes, no host syncs: capturable."""
        n_new, slots, columns = ints[:, 0], ints[:, 1], ints[:, 2:]
        context = PoolContext(self, slots, columns)  # reads the valid mask before any write
        mel, convs = static_cached_solve(self.flow, z, mu, spks, cond, n_new, context, self.layout)
        r, t = columns.shape
        s = convs.shape[0]
        real = torch.arange(t, device=z.device)[None, :] < n_new[:, None]
        self.valid.index_put_((slots[:, None], columns), real)
        # convs [S, 2R, W] → [R, S, 2, W]
        self.convs.index_put_((slots,), convs.view(s, 2, r, -1).permute(2, 0, 1, 3))
        return mel
