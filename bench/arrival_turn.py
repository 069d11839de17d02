"""What an arrival costs the streams already decoding: the engine loop's turn that prefills a
new request's prompt beside B decodes, against a plain decode turn, with the prompt graphs
(engine/prompt_graphs.py) and without them, on one engine.

    python bench/arrival_turn.py --model orpheus-3b --random-weights --batch 128 --context 1300 \
        --kv-cache-dtype fp8
    python bench/arrival_turn.py --model tiny-orpheus --device cpu --batch 4 --context 40  # smoke

B requests are started and decoded until their context reaches --context; then, --arrivals
times each way, one new request arrives and the turn that launches its prefill is timed (the
loop's turn: with async scheduling, the launch of that step and the wait for the one before),
between runs of plain decode turns. The codec runs beside the loop as it does when serving.
Prints one JSON line per way: mean and p90 of the decode and arrival turns in ms, and how many
arrival steps replayed the prompt graphs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from engine.config import EngineConfig
from engine.factory import build_core
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home again."


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def timed_step(core, device: torch.device) -> float:
    start = time.perf_counter()
    core.step()
    return time.perf_counter() - start


def measure(core, device, args, graphs: bool, tag: int) -> dict:
    worker = core.worker
    kept = worker.prompt_graphs
    if not graphs:
        worker.prompt_graphs = None
    graphed_before = core.audio.totals.prefill_graphed
    decode, arrival = [], []
    for i in range(args.arrivals):
        decode += [timed_step(core, device) for _ in range(args.between)]
        n = args.arrival_tokens
        sampling = SamplingParams(seed=i, max_tokens=n, min_tokens=n)
        core.add_request(SpeechRequest(TEXT, sampling=sampling, request_id=f"a{tag}-{i}"))
        arrival.append(timed_step(core, device))
    worker.prompt_graphs = kept
    ms = lambda xs: round(1e3 * statistics.fmean(xs), 3)  # noqa: E731
    return {
        "prompt_graphs": graphs,
        "available": kept is not None,
        "batch": args.batch,
        "context": args.context,
        "decode_turn_ms": ms(decode),
        "decode_turn_p90_ms": round(1e3 * p90(decode), 3),
        "arrival_turn_ms": ms(arrival),
        "arrival_turn_p90_ms": round(1e3 * p90(arrival), 3),
        "arrivals": len(arrival),
        "arrival_steps_from_graphs": core.audio.totals.prefill_graphed - graphed_before,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="orpheus-3b")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=128, help="requests decoding")
    ap.add_argument("--context", type=int, default=1300, help="their tokens before measuring")
    ap.add_argument("--arrivals", type=int, default=30, help="arrivals timed each way")
    ap.add_argument("--between", type=int, default=5, help="decode turns timed between arrivals")
    ap.add_argument("--arrival-tokens", type=int, default=28, help="tokens each arrival makes")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    args = ap.parse_args()

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = load_model(args.model, device=device, dtype=dtype, random_weights=args.random_weights)
    budget = args.context + (args.between + 1) * args.arrivals * 2 + 64
    config = EngineConfig(
        max_num_seqs=args.batch + 2 * args.arrivals + 1,
        kv_cache_dtype=args.kv_cache_dtype,
        realtime_admission=False,
        num_kv_blocks=None if device.type == "cuda" else 2048,
        # Nobody listens here, so every stream runs ahead of real time: no lead cap may sit
        # the decodes out of the turns measured.
        max_lead_s=1e9,
        contended_lead_s=1e9,
    )
    core = build_core(model, config, device)
    for i in range(args.batch):
        sampling = SamplingParams(seed=i, max_tokens=budget, min_tokens=budget)
        core.add_request(SpeechRequest(TEXT, sampling=sampling, request_id=f"b{i}"))
    while (
        min((r.num_generated for r in core.scheduler.requests.values()), default=0) < args.context
    ):
        core.step()
    for tag, graphs in enumerate((True, False, True, False)):  # ABAB: drift hits both
        print(json.dumps(measure(core, device, args, graphs, tag)), flush=True)
    core.close()


if __name__ == "__main__":
    main()
