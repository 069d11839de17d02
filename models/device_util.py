"""Host ↔ device copies staged in page-locked (pinned) host memory, which CUDA copies in
stream order without first syncing the stream, as it may for pageable memory.

`torch.tensor(values, device=cuda)` copies and then synchronises the stream, so every such
call waits for all queued GPU work. A non-blocking copy from pageable memory is usually staged
at once by the driver, but CUDA allows it to sync the stream first, and under load some do
(82 of 780 waited over 1 ms in the Orpheus profile at 140 streams, docs/benchmark-history.md); the engine
step makes a dozen of these. A copy from pinned memory is a DMA the stream runs in its turn:
the host only queues it. The price is that the host buffer must stay untouched until the
device has run the copy, which each of the three ways in here guarantees:

- `StagingRing`: a fixed device buffer refilled every step (a CUDA graph's static input,
  attention metadata; a replay reads the same device memory, so only the host source may
  change). A ring of pinned buffers, each rewritten only after its previous copy ran.
- `upload`: a new device tensor of some values (a step's ids, the sampler's per-row settings,
  a codec's codes): sizes and counts vary, some run on codec threads. The values go through
  a pinned block of torch's caching host allocator, which records the copy's event on the
  block and hands it out again only once that event has passed (at::native's
  copy_kernel_cuda calls CachingHostAllocator_recordEvent).
- `download`: a device tensor read on the host by a thread that needs it now (the codec's
  audio): a copy into pinned memory and a wait for its event, which blocks this thread only.

On the CPU nothing is pinned and no event is made: the values are written and copied
synchronously, and the results are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch

# torch dtypes numpy holds (others, e.g. bfloat16, are built by torch.tensor).
_NUMPY_DTYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
}


def _host_tensor(values: Any, dtype: torch.dtype) -> torch.Tensor:
    """`values` (a flat or nested sequence, or an array) as a new pageable host tensor; through
    numpy where it holds the dtype (3-4 times faster than torch.tensor on a Python list)."""
    np_dtype = _NUMPY_DTYPES.get(dtype)
    if np_dtype is None:
        return torch.tensor(values, dtype=dtype)
    return torch.from_numpy(np.array(values, dtype=np_dtype))


def upload(values: Sequence | np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A new tensor of `values` on `device`, its copy queued without waiting (on a GPU, from a
    pinned block of torch's caching host allocator: see the module's docstring)."""
    host = _host_tensor(values, dtype)
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def download(tensor: torch.Tensor) -> np.ndarray:
    """`tensor` read into host memory, waiting for the current stream's work up to its copy.
    On a GPU the copy lands in pinned memory and this thread waits for the copy's event: a
    blocking copy into pageable memory would go through the driver's staging buffer, which
    copies of other threads' streams share. The result is a copy in ordinary memory (a memcpy
    of the audio's few hundred KB at most), so the pinned block goes back to torch's cache at
    once however long the caller keeps the array."""
    if tensor.device.type != "cuda":
        return tensor.cpu().numpy()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(tensor.device))
    copied.synchronize()
    return host.numpy().copy()


class CopyEvent(Protocol):
    """What a StagingRing needs of a CUDA event (tests hand it fakes that log the calls)."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...


class StagingRing:
    """Host staging for one per-step input copied into fixed device memory: `slots` pinned
    buffers of `capacity` values each, and an event per buffer recorded after its copy.

    `fill(dst)` hands out the next buffer shaped like `dst` to be written, then queues its copy
    into `dst` and records the buffer's event. A buffer is written again `slots` uploads later,
    after waiting for its event: with async scheduling the host fills step N+1 while the device
    runs step N, so the copy two uploads back (step N-1's, for an input uploaded once a step)
    has run and the wait returns at once. An input uploaded k times a step needs 2k slots.

    On the CPU the buffers are ordinary memory and no events are made (`new_event` None),
    unless a test injects them."""

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        slots: int = 2,
        new_event: Callable[[], CopyEvent] | None = None,
    ) -> None:
        if dtype not in _NUMPY_DTYPES:
            raise ValueError(f"a staging ring holds numpy's dtypes, not {dtype}")
        cuda = device.type == "cuda"
        if new_event is None and cuda:
            new_event = torch.cuda.Event
        self.capacity = capacity
        self.dtype = dtype
        self._buffers = [torch.empty(capacity, dtype=dtype, pin_memory=cuda) for _ in range(slots)]
        # An event not yet recorded is passed at once (CUDA's and the fakes' alike).
        self._copied = [new_event() for _ in range(slots)] if new_event is not None else None
        self._next = 0

    @contextmanager
    def fill(self, dst: torch.Tensor) -> Iterator[np.ndarray]:
        """Yields a host array shaped like `dst` (its old contents undefined) for the caller to
        write; on leaving the block, copies it into `dst` without waiting. Nothing is copied
        when the block raises."""
        n = dst.numel()
        if n > self.capacity:
            raise ValueError(
                f"{n} values ({tuple(dst.shape)}) exceed the {self.capacity} this staging "
                "ring was sized for"
            )
        if dst.dtype != self.dtype:
            raise ValueError(f"a staging ring of {self.dtype} cannot fill a {dst.dtype} tensor")
        slot = self._next
        if self._copied is not None:
            self._copied[slot].synchronize()  # this buffer's previous copy has run
        host = self._buffers[slot][:n].view(dst.shape)
        yield host.numpy()
        dst.copy_(host, non_blocking=True)
        if self._copied is not None:
            self._copied[slot].record()
        self._next = (slot + 1) % len(self._buffers)

    def write(self, dst: torch.Tensor, values: Sequence | np.ndarray) -> None:
        """Copy `values` (shaped like `dst`, or broadcast to it) into `dst` through the ring."""
        with self.fill(dst) as host:
            host[...] = values


def gemms_in_conv_precision() -> None:
    """Float32 GEMMs (cuBLAS) in the arithmetic cuDNN's float32 convs use: TF32 unless
    `torch.backends.cudnn.conv.fp32_precision` says otherwise. Called by the float32 codecs
    as they capture their graphs: SNAC's stateful decoder runs its transposed convs and its
    output conv's channel sum as GEMMs (snac_streaming.upsample, conv_taps) where SNAC ran
    cuDNN convs (as IEEE float32 GEMMs they ran on SIMT cores, ~0.4 ms a codec job beside
    Orpheus' steps on an H200, in blocks that held SMs the LLM's next kernel waited for); the
    flow + HiFT codecs' estimator is most of its work in linear layers beside convs already in
    TF32 (a steady Chatterbox row: 0.58 of its 0.69 TFLOP in GEMMs, counted on the CPU by
    torch's FlopCounterMode). Process-wide (cuBLAS has one setting): in a server the codec's
    are the only float32 GEMMs, the LLM's being bf16."""
    if torch.backends.cudnn.conv.fp32_precision == "tf32":
        torch.backends.cuda.matmul.fp32_precision = "tf32"
