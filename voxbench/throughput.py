"""Throughput RTF: seconds of audio produced per wall second with every request submitted at
once and no streaming constraint (docs/benchmarking.md).

No streaming constraint: each request says so (SpeechRequest.realtime False, as a batch job
or a file returned whole would), so the engine neither sizes its chunks for a listener nor
ranks its streams by one. `--listeners` submits them as real-time streams instead (the
listener rules' cost to a burst, side by side).

Measured through the engine surface directly (`submit` → event stream), in its own process,
for the engine and for the HF baseline alike: the gateway's pacing (audio released at most
`lead_ms` ahead of real time) would otherwise cap what a client can observe, and per-frame
Opus encoding would be measured instead of the model. Wall time runs from the first submit to
the last `Finished`; a short warm-up comes first. Where the engine's time went in the burst (its
LLM steps, rows and prefills, its codec jobs, second by second) is read from the engine's loop
counters around it, as the served points read them from /metrics (voxbench/engine_loop.py).

`python -m voxbench.throughput --system voxgate|hf-baseline …` prints / writes one JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from voxbench.engine_loop import gpu_shares, loop_profile, steps_by_second
from voxbench.metrics import distribution
from voxbench.workload import DEFAULT_WORKLOAD, PlannedRequest, burst_plan, load_workload

_RETRY_S = 0.05
# How often the burst reads the engine's loop counters (once a second, as the served points;
# an engine process sends them every 50 ms), and how long it waits after the last stream for
# the counters of its last steps.
_SAMPLE_S = 1.0
_SETTLE_S = 0.15


async def _submit(engine, request) -> Any:
    """Submit, waiting while the engine has no room (its KV pool is finite)."""
    from engine.api import EngineOverloaded

    while True:
        try:
            return await engine.submit(request)
        except EngineOverloaded:
            await asyncio.sleep(_RETRY_S)


async def _drain(stream, t0: float) -> dict[str, Any]:
    from engine.api import AudioChunk

    audio_s, first, reason = 0.0, None, None
    async for event in stream:
        if isinstance(event, AudioChunk):
            audio_s += event.duration_s
            if first is None:
                first = time.monotonic() - t0
        else:
            reason = event.reason.value
    return {
        "audio_s": audio_s,
        "first_audio_s": first,
        "done_s": time.monotonic() - t0,
        "finish": reason,
    }


def speech_request(engine, plan: PlannedRequest, tokens: int | None = None, realtime: bool = True):
    """The engine request of a planned one: its text, `tokens` (default: the plan's) as both
    min_tokens and max_tokens, the model's sampling defaults otherwise; `realtime`: whether
    someone plays it as it is made (SpeechRequest.realtime). `engine`: anything with the
    model's `facts` (an engine client, or the model itself)."""
    from engine.api import SamplingParams, SpeechRequest

    n = tokens or plan.tokens
    sampling = SamplingParams(
        **{**engine.facts.sampling_defaults, "min_tokens": n, "max_tokens": n}
    )
    return SpeechRequest(plan.item.text, None, sampling, realtime=realtime)


def loop_totals(engine) -> dict[str, float] | None:
    """The engine's loop counters now (LoopTotals' fields), or None for an engine without
    them (the Hugging Face baseline)."""
    if not hasattr(engine, "stats"):
        return None
    totals = engine.stats().totals
    return {f.name: float(getattr(totals, f.name)) for f in dataclasses.fields(totals)}


async def _sample_totals(engine, t0: float, samples: list) -> None:
    """(seconds since t0, loop counters) every _SAMPLE_S until cancelled."""
    while True:
        samples.append((time.monotonic() - t0, loop_totals(engine)))
        await asyncio.sleep(_SAMPLE_S)


def burst_profile(
    before: dict[str, float] | None,
    after: dict[str, float] | None,
    samples: list[tuple[float, dict[str, float]]],
    wall_s: float,
) -> dict[str, Any] | None:
    """The burst's engine profile (voxbench/engine_loop.py's, as a served point's), with the
    LLM steps and the GPU's share second by second."""
    profile = loop_profile(before, after, wall_s)
    if profile is None:
        return None
    readings = [(0.0, before), *samples, (wall_s, after)]
    return {
        **profile,
        "steps_by_second": steps_by_second(readings),
        "gpu_share_by_second": gpu_shares(readings),
    }


async def measure_rtf(
    engine, plan: list[PlannedRequest], warmup: int = 2, listeners: bool = False
) -> dict[str, Any]:
    """Submit every request of `plan` at once; total audio seconds / wall seconds, and where
    the engine's time went meanwhile (`engine_loop`, None for an engine without counters).
    `listeners`: as real-time streams (default: without a listener, the metric's "no
    streaming constraint")."""
    warm_tokens = round(engine.facts.token_rate_hz)  # ~1 s of audio each
    for p in plan[:warmup]:
        request = speech_request(engine, p, warm_tokens, realtime=listeners)
        await _drain(await _submit(engine, request), time.monotonic())
    if warmup:
        await asyncio.sleep(_SETTLE_S)  # the warm-up's last counters in before the reading
    before = loop_totals(engine)
    t0 = time.monotonic()
    samples: list[tuple[float, dict[str, float]]] = []
    sampler = asyncio.create_task(_sample_totals(engine, t0, samples)) if before else None

    async def submit_and_drain(p: PlannedRequest) -> dict[str, Any]:
        request = speech_request(engine, p, realtime=listeners)
        return await _drain(await _submit(engine, request), t0)

    # All at once, each stream read from its own submission on. Submitted one after another,
    # each submit waits its round trip to the engine, which answers between steps: 512
    # requests into an engine process stepping at ~10 ms took ~5 s to submit, the last ones
    # starting late, and every stream's first audio waited for the last submit.
    results = await asyncio.gather(*(submit_and_drain(p) for p in plan))
    wall = time.monotonic() - t0
    after = None
    if sampler is not None:
        sampler.cancel()
        await asyncio.sleep(_SETTLE_S)
        after = loop_totals(engine)
    audio = sum(r["audio_s"] for r in results)
    finishes: dict[str, int] = {}
    for r in results:
        finishes[r["finish"]] = finishes.get(r["finish"], 0) + 1
    return {
        "requests": len(plan),
        "listeners": listeners,
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "rtf": round(audio / wall, 3) if wall > 0 else None,
        "tokens": sum(p.tokens for p in plan),
        "tokens_per_s": round(sum(p.tokens for p in plan) / wall, 1) if wall > 0 else None,
        "first_audio_ms": distribution(
            [r["first_audio_s"] * 1000 for r in results if r["first_audio_s"] is not None]
        ),
        "finish": finishes,
        "engine_loop": burst_profile(before, after, samples[1:], wall),
        "per_request": [
            {
                "workload_id": p.item.id,
                "tokens": p.tokens,
                **{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()},
            }
            for p, r in zip(plan, results, strict=True)
        ],
    }


def served_settings(args: argparse.Namespace):
    """The settings `voxgate serve --model MODEL SERVER_ARGS…` would run with: the throughput
    is the engine's as served (its KV-cache dtype, batch cap, codec options), parsed by the
    serve command's own parser so every option means here what it means there."""
    from gateway.cli import build_parser
    from gateway.serve_cli import settings_from_args

    serve = build_parser().parse_args(["serve", "--model", args.model, *args.server_arg])
    return settings_from_args(serve)


def _build(args: argparse.Namespace):
    if args.system == "hf-baseline":
        from voxbench.baselines import load_baseline

        return load_baseline(args.model, args.device, args.random_weights)
    from engine.factory import build_engine

    settings = served_settings(args)
    # Throughput, not real time: real-time admission would cap the burst at what plays live.
    config = dataclasses.replace(
        settings.engine,
        policy=args.policy,
        device=args.device or settings.engine.device,
        realtime_admission=False,
    )
    return build_engine(
        settings.model or args.model,
        settings.codec,
        config,
        random_weights=args.random_weights or settings.random_weights,
        voices_dir=settings.voices_dir,
    )


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    items = load_workload(args.workload, args.max_audio_seconds)
    started = time.monotonic()
    engine = await asyncio.to_thread(_build, args)
    load_s = time.monotonic() - started
    try:
        plan = burst_plan(items, args.requests, engine.facts.token_rate_hz, args.seed)
        result = await measure_rtf(engine, plan, args.warmup, args.listeners)
    finally:
        await engine.shutdown()
    return {
        "system": args.system,
        "model": args.model,
        "policy": args.policy if args.system == "voxgate" else None,
        "method": "engine surface, in process (no WebSocket, no pacing)",
        "load_s": round(load_s, 1),
        **result,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m voxbench.throughput", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--system", choices=["voxgate", "hf-baseline"], default="voxgate")
    p.add_argument("--model", default="tiny-orpheus")
    p.add_argument("--random-weights", action="store_true")
    p.add_argument("--policy", default="slack")
    p.add_argument("--device", default=None)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--listeners",
        action="store_true",
        help="submit the requests as real-time streams (SpeechRequest.realtime), not as "
        "requests without a listener",
    )
    p.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    p.add_argument("--max-audio-seconds", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="a `voxgate serve` option the engine runs with, as the served runs' "
        "--server-arg (repeatable; e.g. --server-arg=--kv-cache-dtype=fp8)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the JSON here (default: stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.requests < 1:
        print("error: --requests must be >= 1", file=sys.stderr)
        return 2
    result = asyncio.run(_main(args))
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
