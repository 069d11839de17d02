"""How long a short high-priority graph (an LLM decode step's shape: ~300 small kernels in a
row) takes while another thread replays long graphs of many kernels (a codec job's shape) on a
low-priority stream, under the CUDA settings that decide how the two share the GPU.

    python bench/stream_contention.py                 # every variant, each in a fresh process
    python bench/stream_contention.py --variant one   # this process's environment only

Variants (environment set before CUDA starts, so each runs in a child process):
  default            the driver's defaults
  connections32      CUDA_DEVICE_MAX_CONNECTIONS=32 (hardware work queues; default 8)
  queues_quarter     CUDA_SCALE_LAUNCH_QUEUES=0.25x (smaller launch queues)
  queues_4x          CUDA_SCALE_LAUNCH_QUEUES=4x (larger; the ninth session's served A/B)
  green_96           the codec's stream in a green context of 96 SMs (engine/sm_partition.py)

Prints per variant the short graph's wall time alone and beside the codec (p50 / p90 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

VARIANTS = {
    "default": {},
    "connections32": {"CUDA_DEVICE_MAX_CONNECTIONS": "32"},
    "queues_quarter": {"CUDA_SCALE_LAUNCH_QUEUES": "0.25x"},
    "queues_4x": {"CUDA_SCALE_LAUNCH_QUEUES": "4x"},
    "green_96": {"VOXGATE_BENCH_GREEN_SMS": "96"},
}


def chain_graph(torch, stream, n_kernels: int, numel: int):
    """A graph of `n_kernels` dependent in-place elementwise kernels over `numel` floats."""
    x = torch.ones(numel, device="cuda")
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            for _ in range(n_kernels):
                x.mul_(1.0001)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(n_kernels):
            x.mul_(1.0001)
    return graph


def measure(reps: int) -> dict:
    import torch

    from engine.sm_partition import codec_stream

    llm_stream = torch.cuda.Stream(priority=-8)
    green = int(os.environ.get("VOXGATE_BENCH_GREEN_SMS", "0"))
    codec = codec_stream(torch.device("cuda"), green).stream
    step = chain_graph(torch, llm_stream, 300, 64 * 1024)  # ~300 short kernels
    job = chain_graph(torch, codec, 6000, 4 * 2**20)  # thousands of longer ones
    torch.cuda.synchronize()

    def timed() -> list[float]:
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step.replay()
            llm_stream.synchronize()
            out.append(1e3 * (time.perf_counter() - t0))
        return out

    alone = timed()
    stop = threading.Event()

    def codec_loop() -> None:
        while not stop.is_set():
            job.replay()
            codec.synchronize()

    thread = threading.Thread(target=codec_loop, daemon=True)
    thread.start()
    time.sleep(0.2)
    beside = timed()
    stop.set()
    thread.join()

    def q(v: list[float]) -> dict:
        return {"p50": statistics.median(v), "p90": statistics.quantiles(v, n=10)[-1]}

    return {"alone_ms": q(alone), "beside_codec_ms": q(beside)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="all", help="'one': this process as it is")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    if args.variant == "one":
        print(json.dumps(measure(args.reps)), flush=True)
        return
    names = list(VARIANTS) if args.variant == "all" else args.variant.split(",")
    for name in names:
        env = {**os.environ, **VARIANTS[name]}
        run = subprocess.run(
            [sys.executable, __file__, "--variant", "one", "--reps", str(args.reps)],
            env=env, capture_output=True, text=True, timeout=120,
        )
        line = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-300:]
        print(f"{name}: {line}", flush=True)


if __name__ == "__main__":
    main()
