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
# kernels: Orpheus' served capacity points on an H200 fitted 0.217-0.250 µs a page, the latest
# three 0.227-0.229, where the copy moved a page in 0.214-0.224 µs (BENCHMARKS.md), so a page is
# priced at its copy time over this share: the middle of what the points fitted. A price too
# dear refuses streams the engine carries for as long as a fresh server's ramp runs on it (the
# live turns of a ramp teach the price little: engine/page_price.py): in the simulator, at
# Orpheus' costs on the H200, a page priced 0.25 µs where it cost 0.229 let in 334 listeners
# where the true price let in 354, none late either way. One too cheap the live turns correct,
# and the listeners' buffers (engine/listener_guard.py) stop admissions meanwhile.
ATTENTION_SHARE = 0.95
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
