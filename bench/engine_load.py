"""The engine loop under Poisson arrivals, or a burst, without the gateway: where a step's time
goes at a served rate, or with every request submitted at once.

    python bench/engine_load.py --model cosyvoice2-0.5b --random-weights --rates 4,8 \
        --duration 8 [--profile-at 4 --profile-steps 100]
    python bench/engine_load.py --model orpheus-3b --random-weights --burst 512 \
        --server-arg=--kv-cache-dtype=fp8 --server-arg=--max-num-seqs=512 [--cprofile-at 2]

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

`--burst N` submits the throughput benchmark's N requests at once (voxgate bench --throughput N:
the same workload items and lengths) and reports the loop second by second: steps, rows, and
each turn's time split into scheduling, launch, resolve, the tokens' bookkeeping, the codec's
hand-offs and the rest. A turn that outlasts its step's device time is host-bound: the device
idles for the difference. `--cprofile-at S` adds a Python profile of the loop's own thread
(cProfile, `--profile-steps` turns from S seconds in): which host functions those are. The
engine runs with `voxgate serve`'s options (`--server-arg`, as voxgate bench passes them).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from engine.factory import apply_gil_switch, load_engine_loop, serving_defaults
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from voxbench.throughput import served_settings, speech_request
from voxbench.workload import burst_plan, load_workload, poisson_plan


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
    ap.add_argument("--burst", type=int, default=0, help="N requests at once instead of rates")
    ap.add_argument("--cprofile-at", type=float, default=0.0, help="with --burst: seconds in")
    ap.add_argument(
        "--listeners",
        choices=("off", "on", "abba"),
        default="off",
        help="with --burst: the requests without a listener (as voxgate bench's throughput), "
        "as real-time streams (on), or both in turn in one process, off-on-on-off (abba)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="a `voxgate serve` option the engine runs with (repeatable)",
    )
    args = ap.parse_args()
    core, model = engine_core(args)
    if args.burst:
        order = {"off": [False], "on": [True], "abba": [False, True, True, False]}
        for listeners in order[args.listeners]:
            run_burst(core, model, args, listeners)
        core.close()
        return
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


def engine_core(args: argparse.Namespace):
    """The engine `voxgate serve --model MODEL SERVER_ARGS…` runs on `args.device`, built in
    this process and warmed up, and its model: real-time admission off for a burst (it would
    cap the burst at what plays live, as voxgate bench's throughput)."""
    settings = served_settings(args)
    served = settings.engine
    config = serving_defaults(
        replace(
            served,
            device=args.device,
            realtime_admission=False if args.burst else served.realtime_admission,
        ),
        args.model,
    )
    apply_gil_switch(config)
    # As serve loads it: the model family's options among the server args (--snac-fp16, …)
    # reach the model.
    model, core = load_engine_loop(
        args.model, settings.codec, config, random_weights=args.random_weights
    )
    return core, model


def timed(fn, record):
    """`fn`, calling `record(seconds)` with the wall time of each call."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            record(time.perf_counter() - t0)

    return wrapper


class HostSplit:
    """Times the worker's launch (queue a step) and resolve (wait for its tokens) calls."""

    def __init__(self, worker) -> None:
        self.launch_s: list[float] = []
        self.resolve_s: list[float] = []
        for name, sink in (("launch", self.launch_s), ("resolve", self.resolve_s)):
            setattr(worker, name, timed(getattr(worker, name), sink.append))

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


class TurnSplit:
    """Wall time of the loop turn's parts, by wrapping the methods EngineCore.step calls:
    scheduling, the worker's launch and resolve, applying the tokens, and the codec's hand-offs
    (submitting jobs, collecting finished ones). Whatever the turn spends outside them is
    `other_ms`."""

    PARTS = (
        ("schedule", "scheduler", "schedule"),
        ("launch", "worker", "launch"),
        ("resolve", "worker", "resolve"),
        ("apply_tokens", None, "_apply_tokens"),
        ("codec_submit", "audio", "submit"),
        ("codec_collect", "audio", "collect"),
    )

    def __init__(self, core) -> None:
        self.spent = {name: 0.0 for name, _, _ in self.PARTS}
        for name, owner, method in self.PARTS:
            target = core if owner is None else getattr(core, owner)
            setattr(target, method, timed(getattr(target, method), self._adder(name)))

    def _adder(self, name: str):
        def add(seconds: float) -> None:
            self.spent[name] += seconds

        return add

    def take(self) -> dict[str, float]:
        out, self.spent = dict(self.spent), {name: 0.0 for name in self.spent}
        return out


def run_burst(core, model, args, listeners: bool) -> None:
    """The throughput benchmark's burst against the loop alone, reported second by second;
    `listeners`: its requests as real-time streams (SpeechRequest.realtime)."""
    plan = burst_plan(load_workload(args.workload), args.burst, model.facts.token_rate_hz)
    for p in plan:
        core.add_request(speech_request(model, p, realtime=listeners))
    split = TurnSplit(core)
    profiler = cProfile.Profile() if args.cprofile_at else None
    profiled = 0
    device_profile = DeviceWindow(args) if args.profile_at else None
    seconds: list[dict] = []
    second = new_second()
    start = time.perf_counter()
    mark = start
    while core.has_work():
        now = time.perf_counter()
        if now - mark >= 1.0:
            seconds.append(summarise_second(len(seconds), second, split.take()))
            second, mark = new_second(), now
        profiling = (
            profiler is not None
            and profiled < args.profile_steps
            and now - start >= args.cprofile_at
        )
        if profiling:
            profiler.enable()
        if device_profile is not None:
            device_profile.turn(now - start)
        t0 = time.perf_counter()
        core.step()
        second["turn_s"] += time.perf_counter() - t0
        if profiling:
            profiler.disable()
            profiled += 1
        second["turns"] += 1
        if core.last_timing.batch_size:
            second["steps"] += 1
            second["rows"] += core.last_timing.batch_size
    wall = time.perf_counter() - start
    seconds.append(summarise_second(len(seconds), second, split.take()))
    audio_s = sum(p.tokens for p in plan) / model.facts.token_rate_hz
    print(
        json.dumps(
            {
                "burst": args.burst,
                "listeners": listeners,
                "wall_s": round(wall, 3),
                "rtf": round(audio_s / wall, 1),
            }
        )
    )
    for row in seconds:
        print(json.dumps(row))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        print(f"cProfile of {profiled} loop turns from {args.cprofile_at} s (the loop's thread):")
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)


class DeviceWindow:
    """A torch profile (host ops and CUDA kernels, every thread) of `--profile-steps` loop turns
    from `--profile-at` seconds into the burst: the device's busy time per turn beside the
    turn's wall time says whether the turn is bound by the device or by the host."""

    def __init__(self, args) -> None:
        self.at_s, self.turns, self.trace = args.profile_at, args.profile_steps, args.trace
        self.profiler: torch.profiler.profile | None = None
        self.seen = 0
        self.started = 0.0

    def turn(self, elapsed_s: float) -> None:
        if self.seen < 0 or elapsed_s < self.at_s:
            return
        if self.profiler is None:
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.start()
            self.started = time.perf_counter()
            return
        self.seen += 1
        if self.seen == self.turns:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.started
            self.profiler.stop()
            self.seen = -1
            kernels = [
                (e.time_range.start, e.time_range.end)
                for e in self.profiler.events()
                if e.device_type == torch.autograd.DeviceType.CUDA
            ]
            summed, busy = device_busy_us(kernels)
            print(
                f"device profile: {self.turns} turns in {1e3 * wall:.1f} ms "
                f"({1e3 * wall / self.turns:.2f} ms a turn); kernels {summed / 1e3:.1f} ms "
                f"summed over streams, the device busy {busy / 1e3:.1f} ms "
                f"({busy / 1e3 / self.turns:.2f} ms a turn)"
            )
            averages = self.profiler.key_averages()
            print(averages.table(sort_by="self_device_time_total", row_limit=30))
            if self.trace:
                self.profiler.export_chrome_trace(self.trace)


def device_busy_us(kernels: list[tuple[float, float]]) -> tuple[float, float]:
    """(the kernels' summed time, the time at least one ran) in µs: their intervals merged."""
    summed = sum(end - start for start, end in kernels)
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(kernels):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return summed, busy


def new_second() -> dict:
    """A second's counters, at zero."""
    return {"turns": 0, "steps": 0, "rows": 0, "turn_s": 0.0}


def summarise_second(index: int, second: dict, parts: dict[str, float]) -> dict:
    """One second of the burst: steps, mean rows, and the mean turn's parts in ms."""
    turns = max(second["turns"], 1)
    row = {
        "s": index,
        "turns": second["turns"],
        "steps": second["steps"],
        "rows": round(second["rows"] / max(second["steps"], 1), 1),
        "turn_ms": round(1e3 * second["turn_s"] / turns, 2),
    }
    for name, spent in parts.items():
        row[f"{name}_ms"] = round(1e3 * spent / turns, 2)
    row["other_ms"] = round(row["turn_ms"] - sum(row[f"{n}_ms"] for n in parts), 2)
    return row


if __name__ == "__main__":
    main()
