"""Host → device uploads without `torch.tensor(values, device=cuda)`'s synchronisation.

`torch.tensor(values, device=cuda)` copies and then synchronises the stream, so every such
call waits for all queued GPU work. A non-blocking copy from pageable memory is usually staged
at once by the driver, but CUDA allows it to sync the stream first, and under load some do
(82 of 780 waited over 1 ms in BENCHMARKS.md's Orpheus profile at 140 streams); the engine
step makes a dozen of these. Staging them in page-locked buffers would avoid that wait.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def upload(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    host = torch.tensor(values, dtype=dtype)
    return host if device.type == "cpu" else host.to(device, non_blocking=True)
