"""Concurrent streams on the CPU, offline: N requests through the engine loop at once, how fast
each is generated against real time, and where a step's time goes.

    python bench/cpu_streams.py --model voxgate-tiny --streams 4 [--cpu-int8] [--workload-id tts-1311]

Each request speaks the same text (a workload item's, default the 179-character tts-1311) for
exactly `--rows` engine steps. Per-stream real-time factor = audio seconds / wall seconds /
streams; ≥ 1 means every stream keeps up. The engine runs in this process on `--threads` torch
threads (default 1, what `voxgate serve` gives voxgate-tiny on 2 cores), without the gateway
(the served figures come from `voxgate bench --device cpu`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.factory import build_core
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model

WORKLOAD = Path(__file__).with_name("tts_workload.jsonl")


def workload_text(item_id: str) -> str:
    for line in WORKLOAD.read_text().splitlines():
        item = json.loads(line)
        if item["id"] == item_id:
            return item["text"]
    raise SystemExit(f"no workload item {item_id!r} in {WORKLOAD}")


def timed(obj, name: str, totals: dict[str, float], key: str) -> None:
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        totals[key] = totals.get(key, 0.0) + time.perf_counter() - t0
        return out

    setattr(obj, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="voxgate-tiny")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--rows", type=int, default=150, help="engine steps (tokens) per request")
    p.add_argument("--workload-id", default="tts-1311")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (voxgate serve: half the cores)"
    )
    p.add_argument("--cpu-int8", action="store_true")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    config = EngineConfig(
        num_kv_blocks=1024, max_num_seqs=max(16, args.streams), cpu_int8=args.cpu_int8
    )
    core = build_core(model, config, torch.device("cpu"))
    totals: dict[str, float] = {}
    timed(model, "forward", totals, "backbone")
    timed(model, "depth_stage", totals, "depth")
    timed(model, "detokenize", totals, "codec")
    text = workload_text(args.workload_id)
    defaults = model.facts.sampling_defaults
    for i in range(args.streams):
        sampling = SamplingParams(
            **{**defaults, "max_tokens": args.rows, "min_tokens": args.rows, "seed": i}
        )
        core.add_request(SpeechRequest(text, None, sampling))
    t0 = time.perf_counter()
    samples, steps, first = 0, 0, None
    while core.has_work():
        new = sum(len(e.pcm) for e in core.step() if isinstance(e, AudioChunk))
        steps += 1
        if new and first is None:
            first = time.perf_counter() - t0
        samples += new
    wall = time.perf_counter() - t0
    audio_s = samples / model.facts.sample_rate
    print(
        json.dumps(
            {
                "model": args.model,
                "streams": args.streams,
                "cpu_int8": args.cpu_int8,
                "threads": args.threads,
                "audio_s": round(audio_s, 2),
                "wall_s": round(wall, 2),
                "rtf_per_stream": round(audio_s / wall / args.streams, 2),
                "first_audio_ms": round(1000 * first) if first is not None else None,
                "ms_per_step": round(1000 * wall / steps, 1),
                "ms_per_step_by_stage": {k: round(1000 * v / steps, 1) for k, v in totals.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
