"""Host → device uploads that never stall the stream.

`torch.tensor(values, device=cuda)` copies and then synchronises the stream, so every such
call waits for all queued GPU work. A non-blocking copy from pageable memory is staged at once
by the driver and needs no synchronisation; the engine step makes a dozen of these.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def upload(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    host = torch.tensor(values, dtype=dtype)
    return host if device.type == "cpu" else host.to(device, non_blocking=True)
