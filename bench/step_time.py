"""Decode step time per batch size against the weight-read floor (GPU).

    python bench/step_time.py --model orpheus-3b --random-weights --batches 1,8,32,64,128
    python bench/step_time.py ... --sync      # the synchronous step, for comparison
    python bench/step_time.py --model cosyvoice2-0.5b --random-weights --batches 8,32 \
        --first-chunk-lane                     # first chunks on a detokenizer lane (A/B)

Prints JSON: copy bandwidth, parameter bytes, floor, and per batch size the LLM step time
(launch + waiting for the tokens; with async scheduling the wait overlaps the next step's
host work), host overhead, wall time per step with the detokenizer
running beside it, and the resulting tokens/s and audio seconds per wall second. Models with
a first-chunk detokenizer lane (CosyVoice 2) also report its jobs (the batch's first chunks,
decoded during the ramp up to --context): how many and their decode time.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import torch

from engine.config import EngineConfig
from engine.factory import apply_gil_switch, build_core, resolve_attention
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.families import family_of
from models.registry import load_model


def copy_bandwidth(device: torch.device, gib: float = 4.0) -> float:
    """Bytes moved per second (read + write) by a device-to-device copy."""
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start = time.perf_counter()
    reps = 10
    for _ in range(reps):
        dst.copy_(src)
    torch.cuda.synchronize()
    return 2 * n * reps / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="orpheus-3b")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--batches", default="1,8,16,32,64,128")
    ap.add_argument("--context", type=int, default=400, help="tokens already in each request's KV")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    ap.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="async scheduling on (the engine's default) or off",
    )
    ap.add_argument(
        "--first-chunk-lane",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the first-chunk detokenizer lane on or off (the engine's default)",
    )
    ap.add_argument(
        "--llm-priority",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the LLM's steps on a high-priority CUDA stream (the engine's default) or not (A/B)",
    )
    ap.add_argument(
        "--gil-switch-ms",
        default=str(EngineConfig.gil_switch_ms),
        help="Python's switch interval in ms (EngineConfig.gil_switch_ms); a comma list "
        "measures each in turn on one loaded model",
    )
    ap.add_argument(
        "--codec-pacing",
        action="store_true",
        help="codec threads wait between a job's graphs (flow + HiFT models' --codec-pacing)",
    )
    ap.add_argument(
        "--snac-fp16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Orpheus: SNAC in float16 where its weights allow (serve's --snac-fp16, the default)",
    )
    ap.add_argument("--profile", type=int, default=0, help="profile the steps of this batch size")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run (tiny-orpheus), no floor")
    ap.add_argument(
        "--trace", default="", help="with --profile: also write a Chrome trace here (.json.gz)"
    )
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batches = [int(b) for b in args.batches.split(",")]
    dtype = torch.bfloat16 if cuda else torch.float32
    # The codec's serving options, for the families that take them (flow + HiFT).
    wanted = {
        "first_chunk_lane": args.first_chunk_lane,
        "codec_pacing": args.codec_pacing,
        "snac_fp16": args.snac_fp16,
    }
    takes = family_of(args.model).option_names()
    model = load_model(
        args.model,
        device=device,
        dtype=dtype,
        random_weights=args.random_weights,
        options={name: value for name, value in wanted.items() if name in takes},
    )
    params = sum(p.numel() * p.element_size() for p in model.llm.parameters())
    bw = copy_bandwidth(device) if cuda else None
    results = []
    for gil_switch_ms in (float(ms) for ms in args.gil_switch_ms.split(",")):
        config = EngineConfig(
            max_num_seqs=max(batches),
            kv_cache_dtype=args.kv_cache_dtype,
            cuda_graphs=not args.eager,
            max_batch_tokens=8192,
            async_scheduling=args.async_scheduling,
            llm_stream_priority=args.llm_priority,
            gil_switch_ms=gil_switch_ms,
            # The batch is what is measured: real-time admission would refuse rows beyond
            # what it has seen play live.
            realtime_admission=False,
        )
        apply_gil_switch(config)
        core = build_core(model, config, device)
        results += measure(core, model, batches, args, sync)
        async_scheduling, priority = core.async_scheduling, core.on_llm_stream.priority
        core.close()
        del core  # its KV cache took a share of the free memory: free it for the next
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    floor_ms = 1e3 * params / bw if bw else None
    print(
        json.dumps(
            {
                "model": args.model,
                "attention": resolve_attention(config, device),
                "async_scheduling": async_scheduling,
                "llm_stream_priority": priority,
                "gpu": torch.cuda.get_device_name() if cuda else "cpu",
                "param_bytes": params,
                "copy_bandwidth_GBps": bw and bw / 1e9,
                "weight_read_floor_ms": floor_ms,
                "context": args.context,
                "results": results,
            },
            indent=1,
        )
    )


def measure(core, model, batches: list[int], args, sync) -> list[dict]:
    """Each batch size's step and codec figures on one engine core."""
    lane = getattr(core.detok, "lane", None)  # the first-chunk lane's codec, when there is one
    results = []
    for batch in batches:
        lane_jobs_before = core.lane_jobs
        core_reqs = []
        for i in range(batch):
            n = args.context + args.steps + 64
            core_reqs.append(
                core.add_request(
                    SpeechRequest(
                        f"Request {i} speaks a sentence.",
                        sampling=SamplingParams(max_tokens=n, min_tokens=n, seed=i),
                    )
                )
            )
        # Prefill and run up to the target context length.
        while min(len(r.output_ids) for r in core_reqs) < args.context:
            core.step()
        sync()
        llm, detok, host, steps = 0.0, 0.0, 0.0, 0
        profiler = None
        if batch == args.profile:
            profiler = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ]
            )
            profiler.start()
        sync()
        wall_start = time.perf_counter()
        for _ in range(args.steps):
            core.step()
            t = core.last_timing
            if t.batch_size == batch:
                llm += t.llm_s
                host += t.host_s
                steps += 1
        sync()
        wall = time.perf_counter() - wall_start
        detok = core.scheduler.detok_time_s
        if profiler is not None:
            profiler.stop()
            averages = profiler.key_averages()
            print(averages.table(sort_by="cpu_time_total", row_limit=25), flush=True)
            print(averages.table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
            if sync is torch.cuda.synchronize:  # the device's own time, kernel by kernel
                print(averages.table(sort_by="self_cuda_time_total", row_limit=25), flush=True)
            if args.trace:
                profiler.export_chrome_trace(args.trace)
        for r in core_reqs:
            core.cancel(r.request_id)
        results.append(
            {
                "batch": batch,
                "gil_switch_ms": core.config.gil_switch_ms,
                "llm_step_ms": 1e3 * llm / max(steps, 1),
                "host_ms": 1e3 * host / max(steps, 1),
                "wall_ms_per_step": 1e3 * wall / args.steps,
                "detok_job_ms": 1e3
                * detok,  # one batched codec call (runs beside the LLM on its stream)
                "tokens_per_s": batch * steps / wall,
                "audio_x_realtime": batch * steps / wall / model.facts.token_rate_hz,
            }
        )
        if lane is not None:  # first chunks of this batch (decoded during the ramp)
            results[-1]["lane_jobs"] = core.lane_jobs - lane_jobs_before
            results[-1]["lane_job_ms"] = 1e3 * (core.scheduler.lane_time_s or 0.0)  # EMA
            lane_eager = getattr(getattr(lane, "detok", None), "eager_calls", None)
            if lane_eager:
                results[-1]["lane_eager_calls"] = {
                    "/".join(map(str, k)): v for k, v in lane_eager.items()
                }
                lane_eager.clear()
        eager = getattr(getattr(model, "detok", None), "eager_calls", None)
        if eager:  # detokenizer calls that found no CUDA graph, by (stage, rows, frames)
            results[-1]["detok_eager_calls"] = {"/".join(map(str, k)): v for k, v in eager.items()}
            eager.clear()
        print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    main()
