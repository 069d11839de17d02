"""GPU time of the SNAC 24 kHz streaming decoder per audio frame, by precision, piece size and
batch (GPU).

    python bench/snac_cost.py --batches 4,16,64 --pieces 1,4,8 --dtypes float32,bfloat16

The engine feeds each stream's new frames to the streaming decoder (models/codecs/
snac_streaming.py) in pieces of 1, 2, 4 or 8 frames, pieces of one size from all streams in one
call. For each dtype, batch and piece size this times one call (a captured CUDA graph replayed,
CUDA events) mid-stream and reports µs per frame and the audio seconds decoded per GPU second;
for low precisions also the audio's error against float32 (RMS of the difference over RMS of
the signal) on the same codes.
"""

from __future__ import annotations

import argparse
import json

import torch
from snac import SNAC

from models.codecs.snac import SnacDetokenizer, snac_24khz_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64", help="rows a call, comma-separated")
    ap.add_argument("--pieces", default="1,4,8", help="frames a row a call, comma-separated")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    state = SNAC(**snac_24khz_config()).eval().state_dict()
    batches = [int(b) for b in args.batches.split(",")]
    detoks = {}
    for name in args.dtypes.split(","):
        model = SNAC(**snac_24khz_config())
        model.load_state_dict(state)
        model = model.to(device, getattr(torch, name))
        detoks[name] = SnacDetokenizer(model, max_streams=max(batches))
    rows = []
    for batch in batches:
        for n in (int(p) for p in args.pieces.split(",")):
            codes = torch.randint(0, 4096, (batch, n, 7), device=device)
            start = torch.full((batch,), 40 * 4, dtype=torch.int64, device=device)  # mid-stream
            end = torch.full_like(start, 2**40)
            seed = torch.arange(batch, dtype=torch.int64, device=device)
            slots = seed + 1
            outputs = {}
            for name, detok in detoks.items():
                inputs = (codes, start, end, seed, slots)
                with torch.inference_mode():
                    detok.decoder.step(*inputs)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        audio = detok.decoder.step(*inputs)
                    graph.replay()
                    begin = torch.cuda.Event(enable_timing=True)
                    finish = torch.cuda.Event(enable_timing=True)
                    begin.record()
                    for _ in range(args.reps):
                        graph.replay()
                    finish.record()
                    torch.cuda.synchronize()
                us = begin.elapsed_time(finish) * 1000 / args.reps
                outputs[name] = audio.float().clone()
                row = {
                    "dtype": name, "piece": n, "batch": batch, "us_per_call": round(us, 1),
                    "us_per_frame": round(us / (batch * n), 3),
                    "audio_x_realtime": round(
                        batch * n * detok.samples_per_frame / detok.sample_rate / (us * 1e-6)
                    ),
                }  # fmt: skip
                if name != "float32" and "float32" in outputs:
                    diff = outputs[name] - outputs["float32"]
                    row["rel_rms_err"] = (
                        diff.pow(2).mean().sqrt() / outputs["float32"].pow(2).mean().sqrt()
                    ).item()
                print(json.dumps(row), flush=True)
                rows.append(row)
                del graph
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}))


if __name__ == "__main__":
    main()
