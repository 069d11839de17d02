"""Per-request recurrent state (SSM and conv states of Mamba-style layers) beside the engine's
paged KV cache.

A recurrent layer's state after a request's last token cannot be rebuilt from pages of keys and
values: each request owns its own, for its whole life. A model with such layers owns a
`RecurrentStatePool` (`SpeechModel.recurrent_state`) and the engine drives it with two calls:

- `begin_step(request_ids, starts, query_lens)` before every forward, with the step's requests in
  the order their tokens are packed: a request whose chunk starts at position 0 gets a slot (a
  fresh one at admission, the same one when it is prefilled again) and starts from a zero
  state; a later chunk or a decode token continues from the state its previous step left.
- `free(request_id)` when the request ends, is cancelled, or is dropped: the slot goes back.

The forward then reads `pool.step` (`StepSlots`: which token rows belong to which slot) and
reads and writes the state tensors at exactly those slots. A step that runs after a request
ended (async scheduling's discarded extra step) writes only that request's slot, and device work
is ordered on one stream, so a slot given to a new request afterwards is reset by the new
request's prefill before anything reads it.

Storage: `specs` describe one request's state for one layer (shape and dtype; the model puts its
classifier-free-guidance rows in the shape); the pool holds, per layer and spec, one tensor of
[capacity, *shape], growing (doubling) when more requests are live at once than it has slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from models.device_util import upload


@dataclass(frozen=True)
class StateSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class Segment:
    """One request's tokens in the step: rows [start, start + length) of the packed tokens."""

    start: int
    length: int
    slot: int
    fresh: bool  # starts at position 0: from a zero state


@dataclass
class StepSlots:
    segments: list[Segment]
    # The single-token segments, batched: their token rows, slots and fresh flags on the device.
    single_rows: torch.Tensor  # [S] long
    single_slots: torch.Tensor  # [S] long
    single_fresh: torch.Tensor  # [S] bool
    longer: list[Segment]  # segments of more than one token (prefill chunks), one by one


class RecurrentStatePool:
    def __init__(
        self,
        num_layers: int,
        specs: Sequence[StateSpec],
        device: torch.device,
        capacity: int = 4,
    ) -> None:
        self.num_layers, self.specs, self.device = num_layers, tuple(specs), device
        self._slot_of: dict[str, int] = {}
        self._free: list[int] = []
        self.capacity = 0
        self.tensors: list[list[torch.Tensor]] = [
            [torch.zeros((0, *s.shape), dtype=s.dtype, device=device) for s in self.specs]
            for _ in range(num_layers)
        ]
        self._grow(capacity)
        self.step: StepSlots | None = None

    @property
    def bytes_per_request(self) -> int:
        return self.num_layers * sum(s.nbytes for s in self.specs)

    @property
    def live(self) -> int:
        """Requests holding a slot now."""
        return len(self._slot_of)

    def slot_of(self, request_id: str) -> int | None:
        return self._slot_of.get(request_id)

    def _grow(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        extra = capacity - self.capacity
        for layer in self.tensors:
            for i, (tensor, spec) in enumerate(zip(layer, self.specs, strict=True)):
                more = torch.zeros((extra, *spec.shape), dtype=spec.dtype, device=self.device)
                layer[i] = torch.cat([tensor, more])
        self._free.extend(range(capacity - 1, self.capacity - 1, -1))  # lowest slot first
        self.capacity = capacity

    def _claim(self, request_id: str) -> int:
        slot = self._slot_of.get(request_id)
        if slot is None:
            if not self._free:
                self._grow(max(4, 2 * self.capacity))
            slot = self._free.pop()
            self._slot_of[request_id] = slot
        return slot

    def free(self, request_id: str) -> None:
        slot = self._slot_of.pop(request_id, None)
        if slot is not None:
            self._free.append(slot)

    def begin_step(
        self, request_ids: Sequence[str], starts: Sequence[int], query_lens: Sequence[int]
    ) -> None:
        segments, row = [], 0
        for request_id, start, length in zip(request_ids, starts, query_lens, strict=True):
            if start == 0:
                slot = self._claim(request_id)
            else:
                slot = self._slot_of.get(request_id)
                if slot is None:
                    raise RuntimeError(
                        f"request {request_id} continues at position {start} but holds no "
                        "recurrent state (it was freed, or its prefix came from shared KV, "
                        "which a recurrent model cannot reuse)"
                    )
            segments.append(Segment(row, length, slot, start == 0))
            row += length
        singles = [s for s in segments if s.length == 1]
        self.step = StepSlots(
            segments,
            upload([s.start for s in singles], torch.long, self.device),
            upload([s.slot for s in singles], torch.long, self.device),
            upload([s.fresh for s in singles], torch.bool, self.device),
            [s for s in segments if s.length > 1],
        )

    # -- what a layer does with it ---------------------------------------------------------------
    def read(self, layer: int, slots: torch.Tensor, fresh: torch.Tensor) -> list[torch.Tensor]:
        """The states of `slots` for `layer` (copies), zero where `fresh`."""
        keep = (~fresh).to(torch.float32)
        out = []
        for tensor in self.tensors[layer]:
            rows = tensor.index_select(0, slots)
            out.append(rows * keep.view(-1, *([1] * (rows.dim() - 1))).to(rows.dtype))
        return out

    def read_one(self, layer: int, segment: Segment) -> list[torch.Tensor]:
        if segment.fresh:
            return [torch.zeros_like(t[segment.slot]) for t in self.tensors[layer]]
        return [t[segment.slot].clone() for t in self.tensors[layer]]

    def write(self, layer: int, slots: torch.Tensor, values: Sequence[torch.Tensor]) -> None:
        for tensor, value in zip(self.tensors[layer], values, strict=True):
            tensor.index_copy_(0, slots, value.to(tensor.dtype))

    def write_one(self, layer: int, segment: Segment, values: Sequence[torch.Tensor]) -> None:
        for tensor, value in zip(self.tensors[layer], values, strict=True):
            tensor[segment.slot].copy_(value)
