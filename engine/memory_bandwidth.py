"""The device's memory bandwidth, measured once at warm-up, to price the KV pages a decode
step reads (real-time admission: engine/realtime_outlook.py).

A decode step reads every running stream's KV pages once, and at hundreds of streams those
reads are most of the step: on an H200 serving Orpheus with fp8 pages, the served turn grew by
0.21-0.25 µs a page in use (least squares over whole capacity points, BENCHMARKS.md), where a
page of 917,504 bytes at the 4.28 TB/s a large copy moves takes 0.214 µs. So a page's price is
its bytes at the bandwidth of a large device-to-device copy (bytes read plus bytes written,
over its time), measured in a fraction of a second, over the share of it the attention kernels
reach served (ATTENTION_SHARE).
"""

from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger("voxgate.engine")

# The share of a large copy's bandwidth decode attention reaches served, beside the codec's
# kernels: Orpheus' served turns on an H200 grew 0.22-0.25 µs a page where the copy moves a page
# in 0.214-0.224 µs (BENCHMARKS.md, the Orpheus capacity points' fits), so a page is priced at
# its copy time over this share, on the dear side: the live turns refine it
# (engine/page_price.py), and until they do, a price too dear only refuses early.
ATTENTION_SHARE = 0.87
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
    bandwidth, over ATTENTION_SHARE. 0 on the CPU, where a step's cost is its arithmetic and launches rather than
    its KV reads (voxgate-tiny's pages are a few KB), and a turn is judged by its rows."""
    if device.type != "cuda":
        return 0.0
    for nbytes in (COPY_BYTES, COPY_BYTES // 4):
        try:
            return page_bytes / (ATTENTION_SHARE * copy_bandwidth(device, nbytes))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    log.warning(
        "no GPU memory left to measure its bandwidth: real-time admission judges streams by "
        "their count, without the KV pages their steps read (lower --kv-memory-fraction)"
    )
    return 0.0
