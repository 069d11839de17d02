"""The engine loop under Poisson arrivals, without the gateway: where a step's time goes at a
served rate.

    python bench/engine_load.py --model cosyvoice2-0.5b --random-weights --rates 4,8 \
        --duration 8 [--profile-at 4 --profile-steps 100]

Requests are the benchmark workload's (bench/tts_workload.jsonl; each `audio_seconds` × the
token rate tokens, as `voxgate bench` asks) arriving at each of `--rates` per second in turn, added to an
`EngineCore` built with `voxgate serve`'s defaults, which this process steps as the serving
engine does. Prints, for decode-only steps and for steps that prefill an arrival, the step's
wall time (p50 / p90) and its batch size, and with `--profile-at T` a torch profile of
`--profile-steps` steps from T seconds into the last rate (host and device time by op): what `voxgate bench`'s
"LLM step" figure is made of. Each step's host time is split into launching the next step
(`launch_ms`: inputs, attention plan, graph replay or eager forward, head and sampling; long
when launches wait for room in the device's queues) and waiting for the previous step's tokens
(`resolve_ms`: the device's time). `--pacing-ab` runs each rate again with the codec's graphs
paced (ModelFacts.codec_pacing, --codec-pacing), in the same process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.factory import apply_gil_switch, build_core, resolve_dtype, serving_defaults
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model
from voxbench.workload import load_workload, poisson_plan


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="cosyvoice2-0.5b")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rates", default="8", help="req/s; a comma list runs each in turn")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals")
    ap.add_argument("--workload", default=str(Path(__file__).with_name("tts_workload.jsonl")))
    ap.add_argument("--profile-at", type=float, default=0.0, help="seconds in (0: no profile)")
    ap.add_argument("--profile-steps", type=int, default=100)
    ap.add_argument("--trace", default="", help="with --profile-at: a Chrome trace (.json.gz)")
    ap.add_argument("--pacing-ab", action="store_true", help="each rate also with codec pacing")
    ap.add_argument(
        "--sampling-ab",
        action="store_true",
        help="each rate also with eager sampling (no head + sampling graphs)",
    )
    args = ap.parse_args()
    config = serving_defaults(EngineConfig(device=args.device), args.model)
    apply_gil_switch(config)
    device = torch.device(args.device)
    model = load_model(
        args.model,
        device=device,
        dtype=resolve_dtype(config, device),
        random_weights=args.random_weights,
    )
    core = build_core(model, config, device)
    core.warm_up()
    host = HostSplit(core.worker)
    sampling_graphs = core.worker.sampling_graphs
    rates = [float(r) for r in args.rates.split(",")]
    for i, rate in enumerate(rates):
        profile_at = args.profile_at if i == len(rates) - 1 else 0.0
        for paced in (False, True) if args.pacing_ab else (model.facts.codec_pacing,):
            for graphs in codec_graphs(model, core):
                graphs.paced = paced
            for sampling in (sampling_graphs, None) if args.sampling_ab else (sampling_graphs,):
                core.worker.sampling_graphs = sampling
                first = paced == model.facts.codec_pacing and sampling is sampling_graphs
                run_rate(core, model, rate, args, profile_at if first else 0.0, host, paced)
    core.close()


class HostSplit:
    """Times the worker's launch (queue a step) and resolve (wait for its tokens) calls."""

    def __init__(self, worker) -> None:
        self.launch_s: list[float] = []
        self.resolve_s: list[float] = []
        for name, sink in (("launch", self.launch_s), ("resolve", self.resolve_s)):
            setattr(worker, name, self._timed(getattr(worker, name), sink))

    @staticmethod
    def _timed(fn, sink: list[float]):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sink.append(time.perf_counter() - t0)

        return timed

    def take(self) -> dict:
        out = {}
        for name, values in (("launch", self.launch_s), ("resolve", self.resolve_s)):
            ms = [1e3 * v for v in values]
            if ms:
                out[f"{name}_ms_p50"] = percentile(ms, 50)
                out[f"{name}_ms_p90"] = percentile(ms, 90)
                out[f"{name}_ms_mean"] = statistics.fmean(ms)
            values.clear()
        return out


def codec_graphs(model, core) -> list:
    """The CallableGraphs of the model's codec and of its first-chunk lane, if captured."""
    codecs = [
        getattr(model, "detok", None),
        getattr(getattr(core.detok, "lane", None), "detok", None),
    ]
    return [c.graphs for c in codecs if c is not None and getattr(c, "graphs", None) is not None]


def run_rate(
    core, model, rate: float, args, profile_at: float, host: HostSplit, paced: bool
) -> None:
    plan = poisson_plan(
        load_workload(args.workload), rate, args.duration, 1, model.facts.token_rate_hz
    )
    steps: list[tuple[bool, int, float]] = []  # (prefilled, batch, wall seconds)
    profiler, profiled = None, 0
    start = time.perf_counter()
    pending = list(plan)
    while pending or core.has_work():
        now = time.perf_counter() - start
        while pending and pending[0].offset_s <= now:
            p = pending.pop(0)
            core.add_request(
                SpeechRequest(
                    p.item.text,
                    sampling=SamplingParams(seed=p.index, max_tokens=p.tokens, min_tokens=p.tokens),
                )
            )
        if profile_at and profiler is None and now >= profile_at:
            profiler = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ]
            )
            profiler.start()
        t0 = time.perf_counter()
        core.step()
        timing = core.last_timing
        if timing.batch_size:
            prefilled = timing.num_tokens > timing.batch_size
            steps.append((prefilled, timing.batch_size, time.perf_counter() - t0))
        if profiler is not None and profiled >= 0:
            profiled += 1
            if profiled == args.profile_steps:
                profiler.stop()
                profiled = -1
    report = {
        "model": args.model,
        "rate": rate,
        "codec_paced": paced,
        "sampling_graphs": core.worker.sampling_graphs is not None,
        "requests": len(plan),
        "seconds": time.perf_counter() - start,
        "lane_jobs": core.lane_jobs,
        "host": host.take(),
    }
    for name, prefilled in (("decode", False), ("prefill", True)):
        walls = [1e3 * w for p, _, w in steps if p == prefilled]
        batches = [b for p, b, _ in steps if p == prefilled]
        if walls:
            report[name] = {
                "steps": len(walls),
                "wall_ms_p50": percentile(walls, 50),
                "wall_ms_p90": percentile(walls, 90),
                "wall_ms_mean": statistics.fmean(walls),
                "batch_p50": percentile(batches, 50),
                "batch_max": max(batches),
            }
    print(json.dumps(report, indent=1), flush=True)
    if profiler is not None and profiled == -1:
        averages = profiler.key_averages()
        print(averages.table(sort_by="self_cpu_time_total", row_limit=30))
        print(averages.table(sort_by="self_cuda_time_total", row_limit=30))
        if args.trace:
            profiler.export_chrome_trace(args.trace)


if __name__ == "__main__":
    main()
