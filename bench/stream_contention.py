"""How long a short high-priority graph (an LLM decode step's shape: ~300 small kernels in a
row) takes while another thread replays long graphs of many kernels (a codec job's shape) on a
low-priority stream, under the CUDA settings that decide how the two share the GPU.

    python bench/stream_contention.py                 # every variant, each in a fresh process
    python bench/stream_contention.py --variant one   # this process's environment only

Variants (environment set before CUDA starts, so each runs in a child process):
  default            the driver's defaults
  connections32      CUDA_DEVICE_MAX_CONNECTIONS=32 (hardware work queues; default 8)
  queues_quarter     CUDA_SCALE_LAUNCH_QUEUES=0.25x (smaller launch queues)
  queues_4x          CUDA_SCALE_LAUNCH_QUEUES=4x (larger launch queues)

Prints per variant, p50 / p90 ms: the short graph's wall time alone, beside the codec
replaying one long graph per job, and beside a paced codec (the job as 10 graphs with a wait
after each, --codec-pacing); and the same for an "eager step" of 100 separately
launched small kernels (the shape of the LLM step's sampling and input uploads, which run
outside its graph): whether launches block behind the codec's queued work.
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
}


def chain_graph(torch, stream, n_kernels: int, numel: int):
    """A graph of `n_kernels` dependent in-place elementwise kernels over `numel` floats, and
    the buffer it writes: the caller keeps both, since a replay writes the buffer's address
    (a graph whose buffer was freed writes memory that is no longer its own)."""
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
    return graph, x


def measure(reps: int) -> dict:
    import torch

    llm_stream = torch.cuda.Stream(priority=-8)
    codec = torch.cuda.Stream()
    step, _step_buffer = chain_graph(torch, llm_stream, 300, 64 * 1024)  # ~300 short kernels
    job, _job_buffer = chain_graph(torch, codec, 6000, 4 * 2**20)  # thousands of longer ones
    job_step, _paced_buffer = chain_graph(torch, codec, 600, 4 * 2**20)  # one paced graph
    small = torch.ones(64 * 1024, device="cuda")
    torch.cuda.synchronize()

    def graph_step() -> None:
        step.replay()

    def eager_step() -> None:
        for _ in range(100):
            small.mul_(1.0001)

    def timed(fn) -> list[float]:
        out = []
        with torch.cuda.stream(llm_stream):
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                llm_stream.synchronize()
                out.append(1e3 * (time.perf_counter() - t0))
        return out

    def beside(fn, paced: bool) -> list[float]:
        stop = threading.Event()

        def codec_loop() -> None:
            while not stop.is_set():
                if paced:
                    for _ in range(10):
                        job_step.replay()
                        codec.synchronize()
                else:
                    job.replay()
                    codec.synchronize()

        thread = threading.Thread(target=codec_loop, daemon=True)
        thread.start()
        time.sleep(0.2)
        try:
            return timed(fn)
        finally:
            stop.set()
            thread.join()

    def q(v: list[float]) -> dict:
        return {
            "p50": round(statistics.median(v), 3),
            "p90": round(statistics.quantiles(v, n=10)[-1], 3),
        }

    report = {}
    for name, fn in (("graph_step", graph_step), ("eager_step", eager_step)):
        report[name] = {
            "alone_ms": q(timed(fn)),
            "beside_codec_ms": q(beside(fn, paced=False)),
            "beside_paced_codec_ms": q(beside(fn, paced=True)),
        }
    return report


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
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        errors = run.stderr.strip().splitlines() or ["no output"]
        line = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else errors[-1][-300:]
        print(f"{name}: {line}", flush=True)


if __name__ == "__main__":
    main()
