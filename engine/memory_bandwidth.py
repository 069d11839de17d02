"""The device's memory bandwidth, measured once at warm-up, to price the KV pages a decode
step reads (real-time admission: engine/realtime_outlook.py).

A decode step reads every running stream's KV pages once, and at hundreds of streams those
reads are most of the step. So a page's price is its bytes at the bandwidth of a large
device-to-device copy (bytes read plus bytes written, over its time), measured in a fraction of
a second: decode attention reads at about that bandwidth served. Orpheus' fp8 pages fitted
from 3 % under to 17 % over their copy time on an H200 (the latest three points 2-7 % over)
and 2-4 % under it on an H100 (BENCHMARKS.md). A price too dear refuses listeners the engine
carries for as long as a fresh server's ramp runs on it (a ramp's turns teach the price
little: engine/page_price.py); one a little too cheap the live turns correct, and the
listeners' buffers (engine/listener_guard.py) stop admissions meanwhile.
"""

from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger("voxgate.engine")

COPY_BYTES = 256 << 20  # large enough to leave the caches, small beside a loaded GPU's memory
REPEATS = 10


def copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES) -> float:
    """Bytes a second `device` moves in a large copy (read + written), the best of REPEATS."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page mapping, lazy allocation
    best = float("inf")
    for _ in range(REPEATS):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            began = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - began
        best = min(best, seconds)
    del src, dst
    return 2 * nbytes / best


def page_seconds(device: torch.device, page_bytes: int) -> float:
    """What a KV page in use adds to a decode step on `device`: its bytes at the measured
    bandwidth. 0 on the CPU, where attention over a page is arithmetic rather than a copy of
    its bytes (voxgate-tiny's pages are a few KB): the warm-up measures it there
    (engine/warm_up_calibration.py)."""
    if device.type != "cuda":
        return 0.0
    for nbytes in (COPY_BYTES, COPY_BYTES // 4):
        try:
            return page_bytes / copy_bandwidth(device, nbytes)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    log.warning(
        "no GPU memory left to measure its bandwidth: real-time admission judges streams by "
        "their count, without the KV pages their steps read (lower --kv-memory-fraction)"
    )
    return 0.0
