"""`voxgate bench`: goodput, TTFA, streaming viability and throughput RTF of the system under
test and of the per-request Hugging Face baseline, in one run (docs/benchmarking.md).

Imports stay light (argparse only) so `voxgate --help` never pays for the benchmark's stack.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"rates must be comma-separated numbers, got {text!r}"
        ) from None
    if any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError("rates must be > 0")
    return rates


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"listener counts must be comma-separated whole numbers, got {text!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("listener counts must be >= 1")
    return counts


def _policies(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def add_bench_parser(subparsers) -> None:
    from voxbench.workload import DEFAULT_WORKLOAD

    p = subparsers.add_parser(
        "bench",
        help="benchmark goodput / TTFA / viability / RTF against the HF baseline",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("system under test")
    target = g.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="ws://HOST:PORT/v1/stream of a running server")
    target.add_argument(
        "--serve", action="store_true", help="start `voxgate serve` (and --baseline) here"
    )
    g.add_argument("--model", default="tiny-orpheus", help="preset or checkpoint (with --serve)")
    g.add_argument(
        "--random-weights", action="store_true", help="a preset's real config, random weights"
    )
    g.add_argument(
        "--device", default=None, help="passed to the servers (default: cuda if present)"
    )
    g.add_argument(
        "--policies",
        "--policy",
        dest="policies",
        type=_policies,
        default=("slack",),
        help="scheduler policies to run, comma-separated (slack,fcfs: the ablation)",
    )
    g.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `voxgate serve` argument, e.g. --server-arg=--max-num-seqs=256 (repeatable)",
    )
    g.add_argument(
        "--baseline", action="store_true", help="also start and measure the HF baseline (--serve)"
    )
    g.add_argument(
        "--baseline-url", default=None, help="ws://… of a running baseline server (with --url)"
    )
    g.add_argument("--api-key", default=None, help="bearer key for servers started with API keys")
    g.add_argument(
        "--startup-timeout", type=float, default=900.0, help="seconds to wait for /ready"
    )

    g = p.add_argument_group("rate points and goodput search")
    g.add_argument(
        "--rates", type=_rates, default=(), help="explicit rates, e.g. 2,4,8 (default: doubling)"
    )
    g.add_argument(
        "--start-rate", type=float, default=1.0, help="first rate of the doubling search"
    )
    g.add_argument("--max-rate", type=float, default=128.0)
    g.add_argument(
        "--baseline-rates", type=_rates, default=(), help="explicit rates for the baseline"
    )
    g.add_argument("--baseline-start-rate", type=float, default=0.125)
    g.add_argument("--bisect-steps", type=int, default=2, help="bisections after the doubling/list")
    g.add_argument("--max-points", type=int, default=10, help="rate points per system at most")
    g.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds of arrivals per point (the method: 60)",
    )
    g.add_argument(
        "--min-requests",
        type=int,
        default=400,
        help="requests per point at least (the method: 400)",
    )
    g.add_argument(
        "--baseline-min-requests",
        type=int,
        default=8,
        help="requests per baseline point at least (it serves one at a time)",
    )
    g.add_argument(
        "--drain-timeout", type=float, default=60.0, help="seconds after the last arrival"
    )
    g.add_argument(
        "--no-early-stop",
        dest="early_stop",
        action="store_false",
        help="run failing points to the end, and every point of a --capacity or "
        "--conversations ladder (default: stop once a point cannot pass, and a ladder after "
        "two failed points in a row)",
    )
    g.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds for the whole run; "
        "later points/systems are skipped (recorded) rather than overrun it",
    )
    g.add_argument("--settle", type=float, default=1.0, help="seconds between points")
    g.add_argument(
        "--warmup", type=int, default=2, help="~1 s requests sent before the first point"
    )

    g = p.add_argument_group("requests and metrics")
    g.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    g.add_argument(
        "--max-audio-seconds", type=float, default=None, help="cap each request (smoke tests)"
    )
    g.add_argument(
        "--token-rate",
        type=float,
        default=None,
        help="model tokens per audio second: min_tokens = max_tokens = round(audio_seconds × "
        "this) (default %(default)s: the rate the server states in session.started)",
    )
    g.add_argument("--format", dest="audio_format", choices=["opus", "pcm16"], default="opus")
    g.add_argument("--frame-ms", type=int, default=20)
    g.add_argument("--sample-rate", type=int, default=None, help="default: 48000 opus, 24000 pcm16")
    g.add_argument("--initial-buffer-ms", type=float, default=0.0, help="client playback buffer b")
    g.add_argument("--slo-ttfa-ms", type=float, default=500.0, help="p90 TTFA bound")
    g.add_argument("--slo-viability", type=float, default=0.99)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--client-procs", type=int, default=1, help="load-generator processes")

    g = p.add_argument_group("capacity mode (instead of the goodput search: voxbench/capacity.py)")
    g.add_argument(
        "--capacity",
        type=_counts,
        default=None,
        metavar="N1,N2,…",
        help="concurrent listeners per point, e.g. 48,96,144: how many real-time streams hold",
    )
    g.add_argument(
        "--stagger",
        type=float,
        default=10.0,
        help="seconds the listeners (or conversations) start over",
    )
    g.add_argument(
        "--stream-seconds", type=float, default=30.0, help="audio each listener asks for"
    )
    g.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="R",
        help="run each point R times on the same server (also --conversations): near the "
        "edge one run of N can hold and the next collapse, and N holds only if all R did",
    )
    g.add_argument(
        "--min-on-time", type=float, default=0.999, help="share of frames on time to hold"
    )

    g = p.add_argument_group(
        "conversations mode (spoken turn-based conversations: voxbench/turn_capacity.py)"
    )
    g.add_argument(
        "--conversations",
        type=_counts,
        default=None,
        metavar="N1,N2,…",
        help="concurrent spoken conversations per point, e.g. 16,32,64 (GLM-4-Voice, "
        "Step-Audio 2): how many hold replies within --slo-ttfa-ms of the end of speech",
    )
    g.add_argument("--turns-each", type=int, default=3, help="turns each conversation takes")
    g.add_argument(
        "--conversation-seconds",
        type=float,
        default=None,
        help="instead of --turns-each: take turns until this long after the session opened",
    )
    g.add_argument(
        "--reply-seconds", type=float, default=6.0, help="each reply's audio (min = max tokens)"
    )
    g.add_argument(
        "--think-seconds",
        type=float,
        default=1.0,
        help="after a reply has played, before the next turn",
    )
    g.add_argument(
        "--vad-silence-ms",
        type=int,
        default=200,
        help="silence after which the server's VAD ends a turn (the latency includes it); "
        "0: turn detection off, the client ends each turn with input.commit",
    )
    g.add_argument(
        "--mic-format",
        choices=["opus", "pcm16"],
        default="opus",
        help="the microphone frames: 20-ms Opus at 48 kHz, or 20-ms pcm16 at 16 kHz",
    )
    g.add_argument(
        "--turn-audio",
        action="append",
        default=[],
        metavar="PATH",
        help="speech clips (files or folders, repeatable) the users speak, cycled "
        "(default: bench/turn_speech/, flite's slt voice)",
    )

    g = p.add_argument_group("throughput and output")
    g.add_argument(
        "--throughput",
        type=int,
        default=0,
        metavar="N",
        help="RTF with N requests at once (0: skip)",
    )
    g.add_argument(
        "--baseline-throughput",
        type=int,
        default=4,
        metavar="N",
        help="the same for the baseline, which serves one at a time",
    )
    g.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    g.add_argument("--commit", default=None, help="record this commit (a checkout without .git)")
    p.set_defaults(func=run_bench)


def config_from_args(args: argparse.Namespace):
    from voxbench.config import BenchConfig
    from voxbench.metrics import Slo

    return BenchConfig(
        url=args.url,
        serve=args.serve,
        baseline=args.baseline,
        baseline_url=args.baseline_url,
        model=args.model,
        random_weights=args.random_weights,
        device=args.device,
        policies=args.policies,
        server_args=tuple(args.server_arg),
        rates=args.rates,
        baseline_rates=args.baseline_rates,
        start_rate=args.start_rate,
        baseline_start_rate=args.baseline_start_rate,
        max_rate=args.max_rate,
        bisect_steps=args.bisect_steps,
        max_points=args.max_points,
        duration_s=args.duration,
        min_requests=args.min_requests,
        baseline_min_requests=args.baseline_min_requests,
        drain_timeout_s=args.drain_timeout,
        initial_buffer_ms=args.initial_buffer_ms,
        slo=Slo(args.slo_ttfa_ms, args.slo_viability),
        audio_format=args.audio_format,
        frame_ms=args.frame_ms,
        sample_rate=args.sample_rate,
        throughput=args.throughput,
        baseline_throughput=args.baseline_throughput,
        workload=args.workload,
        max_audio_seconds=args.max_audio_seconds,
        token_rate=args.token_rate,
        seed=args.seed,
        client_procs=args.client_procs,
        warmup=args.warmup,
        early_stop=args.early_stop,
        settle_s=args.settle,
        startup_timeout_s=args.startup_timeout,
        time_budget_s=args.time_budget,
        api_key=args.api_key,
        commit=args.commit,
        out_dir=args.out,
    )


def _ladder_options(args: argparse.Namespace, bench) -> dict:
    """The options every ladder mode takes (voxbench/ladder.py LadderConfig)."""
    return {
        "model": bench.model,
        "url": bench.url,
        "random_weights": bench.random_weights,
        "device": bench.device,
        "policies": bench.policies,
        "server_args": bench.server_args,
        "stagger_s": args.stagger,
        "min_on_time": args.min_on_time,
        "p90_ttfa_ms": bench.slo.p90_ttfa_ms,
        "buffer_ms": bench.initial_buffer_ms,
        "output_audio": tuple(bench.output_audio.items()),
        "seed": bench.seed,
        "client_procs": bench.client_procs,
        "drain_timeout_s": bench.drain_timeout_s,
        "stop_after_failures": 2 if bench.early_stop else 0,
        "repeats": args.repeats,
        "startup_timeout_s": bench.startup_timeout_s,
        "api_key": bench.api_key,
        "out_dir": bench.out_dir,
        "commit": bench.commit,
    }


def capacity_config_from_args(args: argparse.Namespace):
    from voxbench.capacity import CapacityConfig

    bench = config_from_args(args)  # the shared options, validated once
    return CapacityConfig(
        counts=args.capacity,
        stream_s=args.stream_seconds,
        workload=bench.workload,
        token_rate=bench.token_rate,
        **_ladder_options(args, bench),
    )


def turn_capacity_config_from_args(args: argparse.Namespace):
    from voxbench.turn_capacity import TurnCapacityConfig

    bench = config_from_args(args)
    mic = {"opus": 48000, "pcm16": 16000}[args.mic_format]
    return TurnCapacityConfig(
        counts=args.conversations,
        **_ladder_options(args, bench),
        turns_each=None if args.conversation_seconds is not None else args.turns_each,
        conversation_s=args.conversation_seconds,
        reply_s=args.reply_seconds,
        think_s=args.think_seconds,
        vad_silence_ms=args.vad_silence_ms or None,
        input_audio=(("format", args.mic_format), ("sample_rate", mic), ("frame_ms", 20)),
        turn_audio=tuple(args.turn_audio),
        token_rate=bench.token_rate,
    )


def run_turn_capacity(args: argparse.Namespace) -> int:
    import json

    from voxbench.turn_capacity import TurnCapacityRun

    try:
        cfg = turn_capacity_config_from_args(args)
        run = TurnCapacityRun(cfg, ["voxgate", *sys.argv[1:]])
    except ValueError as exc:
        print(f"voxgate bench: {exc}", file=sys.stderr)
        return 2
    path = run.run()
    data = json.loads(path.read_text())
    print(f"results: {path}")
    return report_systems(data, lambda s: f"{s.get('capacity', 0)} conversations hold")


def run_capacity(args: argparse.Namespace) -> int:
    import json

    from voxbench.capacity import CapacityRun

    path = CapacityRun(capacity_config_from_args(args), ["voxgate", *sys.argv[1:]]).run()
    data = json.loads(path.read_text())
    print(f"results: {path}")
    return report_systems(data, lambda s: f"capacity {s.get('capacity', 0)} listeners")


def report_systems(data: dict, figure: Callable[[dict], str]) -> int:
    """Each system's figure, and the reason for each that could not be measured (its server
    did not start, or could not be measured this way): then the exit status is 1, so a script
    running benches does not take an empty result for a measured one."""
    failed = 0
    for name, system in data["systems"].items():
        print(f"{name}: {figure(system)}")
        if system.get("error"):
            failed += 1
            print(f"{name}: not measured: {system['error'].splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


def _stop_servers_and_exit(signum: int, frame: object) -> None:
    """A SIGTERM stops the servers this bench started, here, then ends the bench with
    128 + signum. Not by raising SystemExit for the `finally` blocks to unwind: raised at an
    arbitrary point (inside an event loop's callbacks or its close) it can be replaced on its
    way out by another error, which the bench then records as the server's and goes on or
    exits 1 with its server still holding the GPU. The points measured so far are saved
    already (each as it ends)."""
    from voxbench.servers import stop_started_servers

    stop_started_servers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum)


def run_bench(args: argparse.Namespace) -> int:
    import json

    # The servers a bench starts run in their own session (a terminal's ^C reaches the bench,
    # which stops them in order), so a SIGTERM (`timeout`, an orchestrator) must stop them
    # too, where Python's default would leave them holding the GPU for the next run.
    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        signal.signal(signal.SIGTERM, _stop_servers_and_exit)
    if args.capacity and args.conversations:
        print("voxgate bench: --capacity and --conversations are separate runs", file=sys.stderr)
        return 2
    if args.capacity:
        return run_capacity(args)
    if args.conversations:
        return run_turn_capacity(args)

    from voxbench.runner import BenchRun

    run = BenchRun(config_from_args(args), argv=["voxgate", *sys.argv[1:]])
    path = run.run()
    data = json.loads(path.read_text())
    print(f"results: {path}")
    print(
        f"goodput: {data['goodput_req_s']} req/s (baseline {data['baseline_goodput_req_s']}), "
        f"ttfa_ms at {data['at_rate_req_s']} req/s: {data['ttfa_ms']}, "
        f"viability {data['viability']}, rtf {data['rtf']} (baseline {data['baseline_rtf']})"
    )
    for note in data.get("deviations", []):
        print(f"deviation: {note}")
    return report_systems(data, lambda s: f"goodput {s.get('goodput_req_s')} req/s")
