"""GPU time of the SNAC 24 kHz decoder per emitted audio frame, by precision and window (GPU).

    python bench/snac_cost.py --batches 4,16,64,256 --chunks 4,8,16 --dtypes float32,bfloat16
    python bench/snac_cost.py --batches 4,5,8,16,64 --chunks 8 --dtypes float32,float16 --compiled
    python bench/snac_cost.py --batches 4,8,16,64 --chunks 4,8 --dtypes float32,float16 --streaming

The engine decodes each stream's audio in windows: `chunk` frames to emit plus the
detokenizer's left context and lookahead (models/codecs/snac.py). For each dtype and chunk
size this times one batched window decode (a captured CUDA graph replayed, CUDA events) and
reports µs per emitted frame and the audio seconds decoded per GPU second, at each batch size
(a served steady job has as many rows as streams with a chunk ready); for low
precisions it also reports the emitted audio's error against float32 (RMS of the difference
over RMS of the signal) on the same codes. `--compiled` also times each dtype with the
decoder's residual units compiled as `--compile-codec` serves them (engine/cuda_graphs.py,
compile_regions; SnacDetokenizer.repeated_blocks), as the variant `<dtype>+compiled`.
`--streaming` also times the stateful decoder (models/codecs/snac_streaming.py: each frame
decoded once, the convs' state carried between calls) on `chunk` frames with no context, as
`<dtype>+streaming` (and, with `--compiled`, its residual-unit steps compiled as served:
`…+streaming+compiled`); its window is the chunk, and its error is against
`float32+streaming`'s audio of the same call.
"""

from __future__ import annotations

import argparse
import json

import torch
from snac import SNAC

from engine.cuda_graphs import compile_regions
from models.codecs.snac import SnacDetokenizer, fold_weight_norm, snac_24khz_config
from models.codecs.snac_streaming import NO_END, StreamingSnacDecoder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="256", help="rows a call, comma-separated")
    ap.add_argument("--chunks", default="4,8,16")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compiled", action="store_true", help="also each dtype compiled")
    ap.add_argument("--streaming", action="store_true", help="also the stateful decoder")
    args = ap.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    base = SNAC(**snac_24khz_config()).eval()
    state = base.state_dict()
    detoks = {}
    streaming = {}
    for name in args.dtypes.split(","):
        for compiled in (False, True) if args.compiled else (False,):
            model = SNAC(**snac_24khz_config())
            model.load_state_dict(state)
            detok = SnacDetokenizer(model.to(device, getattr(torch, name)))
            if compiled:
                compile_regions(detok.repeated_blocks())
            detoks[name + ("+compiled" if compiled else "")] = detok
        if args.streaming:
            model = SNAC(**snac_24khz_config())
            model.load_state_dict(state)
            model = model.to(device, getattr(torch, name))
            fold_weight_norm(model)
            for compiled in (False, True) if args.compiled else (False,):
                decoder = StreamingSnacDecoder(model)  # residual steps of its own
                if compiled:
                    compile_regions(decoder.repeated_blocks())
                key = name + "+streaming" + ("+compiled" if compiled else "")
                streaming[key] = (decoder, getattr(torch, name))
    rows = []
    for batch, chunk in (
        (int(b), int(c)) for b in args.batches.split(",") for c in args.chunks.split(",")
    ):
        ref = next(iter(detoks.values()))
        length = ref.left + chunk + ref.right
        frames = torch.randint(0, 4096, (batch, length, 7), device=device)
        offsets = torch.full((batch,), 40, dtype=torch.int64, device=device)
        seeds = torch.arange(batch, dtype=torch.int64, device=device)
        outputs = {}
        for name, detok in detoks.items():
            with torch.inference_mode():
                for _ in range(2):  # allocations; a compiled variant compiles here
                    detok._decode_codes(frames, offsets, seeds)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    audio = detok._decode_codes(frames, offsets, seeds)
                graph.replay()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.reps):
                    graph.replay()
                end.record()
                torch.cuda.synchronize()
            us = start.elapsed_time(end) * 1000 / args.reps
            spf = detok.samples_per_frame
            emitted = audio[:, ref.left * spf : (ref.left + chunk) * spf].float()
            outputs[name] = emitted
            row = {
                "dtype": name, "chunk": chunk, "window": length, "batch": batch,
                "us_per_call": round(us, 1),
                "us_per_emitted_frame": round(us / (batch * chunk), 3),
                "audio_x_realtime": round(batch * chunk * spf / detok.sample_rate / (us * 1e-6)),
            }  # fmt: skip
            if name != "float32" and "float32" in outputs:
                diff = emitted - outputs["float32"]
                row["rel_rms_err"] = (
                    diff.pow(2).mean().sqrt() / outputs["float32"].pow(2).mean().sqrt()
                ).item()
            print(json.dumps(row), flush=True)
            rows.append(row)
            del graph
        for name, (decoder, dtype) in streaming.items():
            row, audio = _time_streaming(decoder, dtype, frames[:, :chunk], args.reps)
            outputs[name] = audio.float()
            reference = outputs.get("float32+streaming")
            if reference is not None and name != "float32+streaming":
                diff = outputs[name] - reference
                row["rel_rms_err"] = (
                    diff.pow(2).mean().sqrt() / reference.pow(2).mean().sqrt()
                ).item()
            row.update(dtype=name, chunk=chunk, window=chunk, batch=batch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}))


def _time_streaming(decoder, dtype, codes: torch.Tensor, reps: int):
    """One call of the stateful decoder on `codes` [B, chunk, 7] (rows 40 latent steps into
    their streams, zero state: the values do not change the time), captured in a CUDA graph
    and replayed; returns the row's timings and the call's audio."""
    batch, chunk = codes.shape[:2]
    device = codes.device
    state = decoder.new_state(batch, device, dtype)
    position = torch.full((batch,), 40, dtype=torch.int64, device=device)
    end = torch.full((batch,), NO_END, dtype=torch.int64, device=device)
    seeds = torch.arange(batch, dtype=torch.int64, device=device)
    call = decoder.decode_frames
    with torch.inference_mode():
        for _ in range(2):  # allocations; a compiled variant compiles here
            call(codes, state, position, end, seeds)
        torch.cuda.synchronize()
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
    us = start.elapsed_time(stop) * 1000 / reps
    spf = 4 * decoder.samples_per_latent
    row = {
        "us_per_call": round(us, 1),
        "us_per_emitted_frame": round(us / (batch * chunk), 3),
        "audio_x_realtime": round(batch * chunk * spf / decoder.model.sampling_rate / (us * 1e-6)),
    }
    return row, audio.clone()


if __name__ == "__main__":
    main()
