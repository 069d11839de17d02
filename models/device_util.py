"""Host → device uploads that never stall the stream.

`torch.tensor(values, device=cuda)` copies and then synchronises the stream, so every such
call waits for all queued GPU work. A non-blocking copy from pageable memory is usually staged at
once by the driver, but CUDA allows it to sync the stream first, and under load some do (the
Orpheus profile in BENCHMARKS.md: 82 of 780 waited over 1 ms); the engine step makes a dozen
of these, and staging them in pinned buffers is the next step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def upload(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    host = torch.tensor(values, dtype=dtype)
    return host if device.type == "cpu" else host.to(device, non_blocking=True)
