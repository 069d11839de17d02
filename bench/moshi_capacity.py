"""Full-duplex capacity: the most concurrent Moshi sessions with >= 99.9 % of output frames on
time (engine/frame_scheduler.py: frame n is on time when its tick's step finishes within one
frame period of the tick).

    # CPU smoke (tiny model, seconds):
    python bench/moshi_capacity.py --model tiny-moshi --seconds 3 --start 1 --max-sessions 8
    # H200, the real Moshi-7B shape with random weights (about 4 minutes):
    python bench/moshi_capacity.py --model moshi-7b --random-weights --seconds 8 \
        --start 16 --max-sessions 256 --time-budget 240

Each trial runs N sessions in the engine's own loop on the wall clock: every simulated client
pushes its microphone frames exactly in real time (80 ms of a noisy tone each), the engine
ticks once per frame for all of them, and the trial's on-time fraction counts every output
frame. The search doubles N while trials pass, then bisects between the last pass and the
first failure. Writes JSON (every trial, the answer, the machine) to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from engine.config import EngineConfig
from engine.factory import build_core, resolve_device, resolve_dtype
from engine.gc_pauses import freeze_loaded
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model

TARGET = 0.999


def client_audio(seconds: float, rate: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate) + rate) / rate
    tone = 0.2 * np.sin(2 * np.pi * rng.uniform(100, 300) * t)
    return (tone + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


class GcPauses:
    """Python's garbage-collection pauses during a trial (gc.callbacks): single slow frame
    steps above 100 sessions are suspected to be full collections."""

    def __init__(self) -> None:
        self.count = self.full = 0
        self.total_s = self.max_s = 0.0
        self._began: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            took = time.perf_counter() - self._began
            self.count += 1
            self.full += int(info.get("generation") == 2)
            self.total_s += took
            self.max_s = max(self.max_s, took)

    def report(self) -> dict:
        return {
            "collections": self.count,
            "full": self.full,
            "max_ms": round(1000 * self.max_s, 1),
            "total_ms": round(1000 * self.total_s, 1),
        }


def trial(core, n: int, seconds: float) -> dict:
    """N sessions for `seconds` of audio each, all starting together."""
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        result = _trial(core, n, seconds)
    finally:
        gc.callbacks.remove(pauses)
    return {**result, "gc": pauses.report()}


def _trial(core, n: int, seconds: float) -> dict:
    model = core.model
    frame_s = model.facts.seconds_per_token
    spf = core.samples_per_frame
    frames = int(round(seconds / frame_s))
    params = SamplingParams(
        temperature=0.8, top_k=250, top_p=1.0, repetition_penalty=1.0, max_tokens=frames + 2, seed=0
    )
    sessions = [core.add_request(SpeechRequest("", None, params)) for _ in range(n)]
    audio = [client_audio(seconds, model.facts.sample_rate, i) for i in range(n)]
    pushed = [0] * n
    start = time.monotonic()
    step_s: list[float] = []
    while core.has_work():
        now = time.monotonic()
        due = min(frames, int((now - start) / frame_s) + 1)  # frames each client has spoken
        for i, request in enumerate(sessions):
            while pushed[i] < due:
                chunk = audio[i][pushed[i] * spf : (pushed[i] + 1) * spf]
                core.push_audio(request.request_id, chunk)
                pushed[i] += 1
        if all(p >= frames for p in pushed) and now - start > seconds + 2.0:
            for request in sessions:  # clients hang up; sessions that are still live end now
                core.end_session(request.request_id)
            break
        wait = core.seconds_until_due()
        if wait and wait > 0:
            next_push = start + due * frame_s
            time.sleep(max(0.0, min(wait, next_push - time.monotonic())))
            continue
        t0 = time.monotonic()
        core.step()
        if core.last_timing.batch_size:
            step_s.append(time.monotonic() - t0)
    stats = [core.recent_stats[r.request_id] for r in sessions]
    out = sum(s.frames_out for s in stats)
    on_time = sum(s.on_time for s in stats)
    steps = np.array(step_s or [0.0])
    return {
        "sessions": n,
        "frames_out": out,
        "on_time": on_time,
        "on_time_fraction": on_time / max(out, 1),
        "max_late_ms": round(1000 * max(s.max_late_s for s in stats), 1),
        "input_late": sum(s.input_late for s in stats),
        "input_dropped": sum(s.input_dropped for s in stats),
        "resyncs": core.scheduler.resyncs,
        "step_ms_p50": round(1000 * float(np.percentile(steps, 50)), 2),
        "step_ms_p99": round(1000 * float(np.percentile(steps, 99)), 2),
        # Which step was slowest (0: the priming tick): a one-off stall shows here.
        "slowest_step": [int(steps.argmax()), round(1000 * float(steps.max()), 1)],
        "wall_s": round(time.monotonic() - start, 1),
    }


def search(core, args) -> tuple[int, list[dict]]:
    trials, best, worst = [], 0, None
    deadline = time.monotonic() + args.time_budget
    n = args.start

    def run(n: int) -> bool:
        core.scheduler.resyncs = 0
        result = trial(core, n, args.seconds)
        result["passed"] = result["on_time_fraction"] >= TARGET
        trials.append(result)
        print(json.dumps(result), flush=True)
        return result["passed"]

    while n <= args.max_sessions and time.monotonic() < deadline:  # double while passing
        if not run(n):
            worst = n
            break
        best = n
        n *= 2
    if worst is None:
        return best, trials
    while worst - best > max(1, best // 16) and time.monotonic() < deadline:  # bisect
        mid = (best + worst) // 2
        if run(mid):
            best = mid
        else:
            worst = mid
    return best, trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-moshi")
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--seconds", type=float, default=8.0, help="audio per session per trial")
    parser.add_argument("--start", type=int, default=1)
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=256,
        help="search ceiling; also the engine's max_num_seqs (CUDA graphs cover up to 256)",
    )
    parser.add_argument("--time-budget", type=float, default=240.0, help="search stops after this")
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="freeze what start-up left out of the collector's full collections, as the server "
        "does (engine/gc_pauses.py); without it full collections of ~200 ms on the H200 host "
        "make sessions late from ~68 on",
    )
    parser.add_argument("--device", default=None)
    parser.add_argument("--attention", default=None)
    parser.add_argument("--out", default=None, help="JSON path (default: bench/results/…)")
    args = parser.parse_args()

    config = EngineConfig(
        device=args.device, attention=args.attention, max_num_seqs=args.max_sessions
    )
    device = resolve_device(config)
    dtype = resolve_dtype(config, device)
    t0 = time.monotonic()
    model = load_model(args.model, None, device, dtype, random_weights=args.random_weights)
    if not model.facts.full_duplex:
        raise SystemExit(f"{args.model} is not a full-duplex model")
    core = build_core(model, config, device)
    load_s = time.monotonic() - t0
    core.warm_up()
    if args.gc_freeze:
        freeze_loaded()
    warm_up_s = time.monotonic() - t0 - load_s
    best, trials = search(core, args)
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu"
    )
    report = {
        "benchmark": "moshi_capacity",
        "model": args.model,
        "random_weights": args.random_weights,
        "device": name,
        "dtype": str(dtype),
        "attention": type(core.worker.attn).__name__,
        "target_on_time": TARGET,
        "seconds_per_trial": args.seconds,
        "max_sessions_on_time": best,
        "load_s": round(load_s, 1),
        "warm_up_s": round(warm_up_s, 1),
        "gc_freeze": args.gc_freeze,
        "trials": trials,
    }
    stamp = datetime.date.today().isoformat()
    slug = name.lower().replace(" ", "-")
    out = Path(args.out or f"bench/results/{stamp}-{slug}-{args.model}-capacity.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"max sessions with >= {TARGET:.1%} frames on time: {best}  ({out})")
    core.close()


if __name__ == "__main__":
    main()
