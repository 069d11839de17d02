"""A CUDA stream confined to part of the GPU's SMs (a CUDA green context), for the steady codec.

Why: the LLM's decode step is ~300 short kernels in sequence. Stream priority gives it freed
SMs first, but does not pre-empt blocks already running, so while a codec job (CosyVoice 2's
flow + HiFT: large kernels over 8–32 rows) fills every SM, each of the step's kernels waits
for some of the codec's blocks to finish. On the H200 that made a ~3 ms step take 5–9 ms under
load (BENCHMARKS.md). Confining the steady codec to a green context of N SMs keeps the others
free of it: the step's kernels start at once there (the LLM itself still may use every SM).

Green contexts need a CUDA 12.4+ driver and a torch built with them; where either is missing
the caller gets a plain stream and a warning, since the partition is a speed setting, never a
correctness one. Graphs replayed on such a stream must be captured on it too (a captured
kernel keeps the context it was captured in): CallableGraphs captures on the current stream.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("voxgate.sm_partition")

# cuDevSmResourceSplitByCount hands out SMs in groups: 8 on compute capability 9.x (H100/H200),
# as FlashInfer's green_ctx and the CUDA driver documentation give them; 2 or 4 on older parts.
_SM_GRANULARITY = {6: 1, 7: 2, 8: 4}


def sm_granularity(major: int) -> int:
    return _SM_GRANULARITY.get(major, 8)


def partition_size(requested: int, total: int, major: int) -> int | None:
    """The SM count a green context of `requested` SMs gets (rounded down to the device's
    granularity), or None when there is nothing to partition: 0 asks for every SM, and a
    request of all of them (or more) is the whole device. Pure, so it is tested without a GPU."""
    if requested < 0:
        raise ValueError(f"an SM partition must be >= 0 SMs, got {requested}")
    if requested == 0 or requested >= total:
        return None
    step = sm_granularity(major)
    return max(step, requested // step * step)


@dataclass
class PartitionedStream:
    """A stream and the green context it belongs to, if any."""

    stream: Any  # torch.cuda.Stream
    sms: int | None  # None: the whole device (no partition)
    context: Any = None


# Green contexts by (device index, SMs), made once and kept for the life of the process:
# torch's caching allocator and cuBLAS keep events and workspaces keyed by the stream after its
# user is gone, and a destroyed context fails them ("context is destroyed", seen on the H200
# when a second engine core was built in one process).
_GREEN: dict[tuple[int, int], tuple[Any, Any]] = {}


def codec_stream(device: torch.device, sms: int, priority: int = 0) -> PartitionedStream:
    """A stream on `device` whose kernels run on at most `sms` SMs (0: all of them; a new
    plain stream). A partition's stream is made once and handed to each caller after."""
    props = torch.cuda.get_device_properties(device)
    size = partition_size(sms, props.multi_processor_count, props.major)
    if size is None:
        return PartitionedStream(torch.cuda.Stream(device, priority=priority), None)
    try:
        context, stream = _green_stream(device, size)
    except Exception as exc:  # an old driver or a torch without green contexts
        log.warning(
            "cannot confine the codec to %d of %d SMs (%s: %s); it shares every SM with the "
            "LLM. Use a CUDA 12.4+ driver and a torch with green contexts, or drop --codec-sms.",
            size,
            props.multi_processor_count,
            type(exc).__name__,
            exc,
        )
        return PartitionedStream(torch.cuda.Stream(device, priority=priority), None)
    log.info("steady codec confined to %d of %d SMs", size, props.multi_processor_count)
    return PartitionedStream(stream, size, context)


def _green_stream(device: torch.device, sms: int) -> tuple[Any, Any]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (index, sms) not in _GREEN:
        _GREEN[index, sms] = _new_green_stream(index, sms)
    return _GREEN[index, sms]


def _new_green_stream(index: int, sms: int) -> tuple[Any, Any]:
    from torch.cuda import green_contexts

    if not getattr(green_contexts, "SUPPORTED", True):
        raise RuntimeError("this torch build has no CUDA green contexts")
    try:  # torch >= 2.12: keywords only
        context = green_contexts.GreenContext.create(num_sms=sms, device_id=index)
    except TypeError:  # torch 2.10/2.11: create(num_sms, device_id)
        context = green_contexts.GreenContext.create(sms, index)
    if hasattr(context, "Stream"):
        return context, context.Stream()
    # Older API: the green context's stream is the one current while it is set.
    context.set_context()
    try:
        stream = torch.cuda.current_stream(index)
    finally:
        context.pop_context()
    return context, stream
