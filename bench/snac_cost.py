"""GPU time of the SNAC 24 kHz decoder per emitted audio frame, by precision and chunk (GPU).

    python bench/snac_cost.py --batches 4,16,64,256 --chunks 4,8,16 --dtypes float32,bfloat16
    python bench/snac_cost.py --batches 4,5,8,16,64 --chunks 8 --dtypes float32,float16 --compiled
    python bench/snac_cost.py --batches 16,64 --chunks 4,8 --dtypes float32 --compiled --triton

The engine decodes each stream's audio with SNAC's stateful decoder (models/codecs/
snac_streaming.py: each frame decoded once, the convs' state carried between calls), one call
per chunk of frames (models/codecs/snac.py). For each dtype and chunk size this times one
batched call (a captured CUDA graph replayed, CUDA events; rows 40 latent steps into their
streams, zero state: the values do not change the time) and reports µs per emitted frame and
the audio seconds decoded per GPU second, at each batch size (a served steady job has as many
rows as streams with a chunk ready); for other dtypes it also reports the audio's error against
float32's (RMS of the difference over RMS of the signal) on the same codes. `--triton` also
times each dtype as the engine serves it on CUDA, as the variant `<dtype>+triton`: the residual
units, the Snakes and the upsamplings with their noise as hand-written Triton kernels
(models/codecs/snac_triton.py) and the two symmetric convs compiled (`--compile-codec`:
engine/cuda_graphs.py, compile_regions; SnacDetokenizer.repeated_blocks); `--compiled`, with every repeated step compiled, the residual
units too (Inductor's kernels for them: what the hand-written ones are measured against), as
`<dtype>+compiled`; with `--triton` it also prints the tile the tuner chose for each width and
size class (the first shape of a class tunes it). `--profile` prints, for each variant at the
first batch and chunk, the kernels of its replays by device time (a torch profile): which of
the decoder's kernels to work on; with `TORCH_LOGS=output_code` in the environment Inductor
also prints the code it generated for the compiled variants.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from snac import SNAC

from engine.cuda_graphs import compile_regions
from models.codecs.snac import fold_weight_norm, snac_24khz_config
from models.codecs.snac_streaming import NO_END, StreamingSnacDecoder
from models.device_util import gemms_in_conv_precision


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="256", help="rows a call, comma-separated")
    ap.add_argument("--chunks", default="4,8,16")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--compiled", action="store_true", help="also each dtype compiled, residual units too"
    )
    ap.add_argument(
        "--triton",
        action="store_true",
        help="also each dtype as served: SNAC's Triton kernels, the symmetric convs compiled",
    )
    ap.add_argument("--profile", action="store_true", help="kernels by time, first shape")
    args = ap.parse_args()
    device = torch.device("cuda")
    gemms_in_conv_precision()  # float32 GEMMs in TF32, as the engine serves SNAC
    torch.manual_seed(0)
    weights = SNAC(**snac_24khz_config()).eval().state_dict()
    variants = {}
    for name in args.dtypes.split(","):
        model = SNAC(**snac_24khz_config())
        model.load_state_dict(weights)
        model = model.to(device, getattr(torch, name))
        fold_weight_norm(model)
        kinds = [""] + ["+compiled"] * args.compiled + ["+triton"] * args.triton
        for kind in kinds:
            decoder = StreamingSnacDecoder(model)  # residual steps of its own
            if kind == "+triton":
                decoder.use_triton_kernels()
            if kind:
                compile_regions(decoder.repeated_blocks())
            variants[name + kind] = (decoder, getattr(torch, name))
    rows = []
    shapes = [(int(b), int(c)) for b in args.batches.split(",") for c in args.chunks.split(",")]
    for batch, chunk in shapes:
        codes = torch.randint(0, 4096, (batch, chunk, 7), device=device)
        reference = None
        for name, (decoder, dtype) in variants.items():
            profile = args.profile and (batch, chunk) == shapes[0]
            row, audio = _time_call(decoder, dtype, codes, args.reps, name if profile else None)
            audio = audio.float()
            if name == "float32":
                reference = audio
            elif reference is not None:
                diff = audio - reference
                row["rel_rms_err"] = (
                    diff.pow(2).mean().sqrt() / reference.pow(2).mean().sqrt()
                ).item()
            row.update(dtype=name, chunk=chunk, batch=batch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.triton:
        from models.codecs import snac_triton

        # The tile the tuner chose for each kernel and (width, size class, …) key it has seen.
        tiles = {
            f"{kernel.__name__} {key}": str(config)
            for kernel, tuned in snac_triton._TUNED.items()
            for key, config in tuned.cache.items()
        }
        print(json.dumps({"tiles": tiles}))
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}))


def _time_call(decoder, dtype, codes: torch.Tensor, reps: int, profile: str | None = None):
    """One call of the stateful decoder on `codes` [B, chunk, 7], captured in a CUDA graph and
    replayed; returns the row's timings and the call's audio. `profile`: the variant's name,
    to print its replays' kernels by device time."""
    batch, chunk = codes.shape[:2]
    device = codes.device
    state = decoder.new_state(batch, device, dtype)
    position = torch.full((batch,), 40, dtype=torch.int64, device=device)
    end = torch.full((batch,), NO_END, dtype=torch.int64, device=device)
    seeds = torch.arange(batch, dtype=torch.int64, device=device)
    call = decoder.decode_frames
    with torch.inference_mode():
        began = time.perf_counter()
        for _ in range(2):  # allocations; a compiled variant compiles here
            call(codes, state, position, end, seeds)
        torch.cuda.synchronize()
        warm_up_s = time.perf_counter() - began
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            audio, _ = call(codes, state, position, end, seeds)
        graph.replay()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        stop.record()
        torch.cuda.synchronize()
        if profile is not None:
            _print_kernels(graph, reps, f"{profile}, batch {batch}, chunk {chunk}")
    us = start.elapsed_time(stop) * 1000 / reps
    spf = 4 * decoder.samples_per_latent
    row = {
        "us_per_call": round(us, 1),
        "us_per_emitted_frame": round(us / (batch * chunk), 3),
        "audio_x_realtime": round(batch * chunk * spf / decoder.model.sampling_rate / (us * 1e-6)),
        # The first shape of a compiled variant compiles its programs here: what a server's
        # first start pays for them (a cold Inductor cache).
        "warm_up_s": round(warm_up_s, 1),
    }
    return row, audio.clone()


def _print_kernels(graph: torch.cuda.CUDAGraph, reps: int, title: str) -> None:
    """The kernels of `reps` replays of `graph`, by device time (per replay)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(reps):
            graph.replay()
        torch.cuda.synchronize()
    print(f"kernels of {title} ({reps} replays):", flush=True)
    print(profiler.key_averages().table(sort_by="self_device_time_total", row_limit=25))


if __name__ == "__main__":
    main()
