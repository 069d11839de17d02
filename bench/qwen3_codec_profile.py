"""Where a Qwen3-TTS codec job's GPU time goes, and what the levers on it would give (CUDA).

Serving Qwen3-TTS on one GPU, the 12 Hz speech decoder is the first part to run out: on an
H100 at 25 requests a second its steady jobs ran back to back (BENCHMARKS.md). This times the
decoder as the engine runs it (models/qwen3_tts/codec_streams.py: streams' states in slots,
calls replayed from CUDA graphs) at the published 1.7B decoder's shape with seeded random
weights, for jobs of ROWS streams × 4 frames each, in these variants, each on a fresh decoder
copy and graphs of its own:

- `float32`: as served;
- `tf32-matmul`: the pre-transformer's matmuls on TF32 tensor cores too (the convolutions
  already are: cuDNN's default);
- `snake-compiled`: the SnakeBeta activations compiled (engine/cuda_graphs.py
  compile_regions: one fused kernel where eager runs ~8);

and prints each variant's job time and its cost per second of audio, then the baseline's
kernels by GPU time (torch.profiler) for one job size.

    . bench/gpu_setup.sh && python bench/qwen3_codec_profile.py [--rows 8,28,64] [--jobs 30]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from engine.cuda_graphs import CallableGraphs, compile_regions
from models.qwen3_tts.checkpoint import random_decoder
from models.qwen3_tts.codec import SpeechDecoder
from models.qwen3_tts.codec_layers import SnakeBeta
from models.qwen3_tts.codec_streams import CodecStreams
from models.qwen3_tts.configs import SPEECH_TOKENIZER

FRAMES = 4  # a steady job's chunk: 4 frames of 80 ms
FRAME_S = 0.08


def time_jobs(streams: CodecStreams, rows: int, jobs: int, device: torch.device) -> float:
    """Median seconds of a job of `rows` streams × FRAMES frames (fresh streams, warmed)."""
    group = [streams.new_stream() for _ in range(rows)]
    gen = torch.Generator().manual_seed(rows)
    vocab, k = streams.decoder.cfg.codebook_size, streams.num_quantizers
    times = []
    for i in range(jobs + 5):
        frames = torch.randint(0, vocab, (rows, FRAMES, k), generator=gen).tolist()
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        streams.decode(group, frames)  # downloads the audio: the job's end
        if i >= 5:
            times.append(time.perf_counter() - start)
    del group  # their slots go back as the streams go
    times.sort()
    return times[len(times) // 2]


def variant(name: str, base: SpeechDecoder, device: torch.device, rows: list[int], jobs: int):
    decoder = copy.deepcopy(base)
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32-matmul"
    graphs = CallableGraphs(device, compiled=name == "snake-compiled")
    if graphs.compiled:
        compile_regions([m for m in decoder.modules() if isinstance(m, SnakeBeta)])
    streams = CodecStreams(decoder)
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        t0 = time.perf_counter()
        streams.enable_cuda_graphs(graphs)
        capture_s = time.perf_counter() - t0
        out = {}
        for r in rows:
            job_s = time_jobs(streams, r, jobs, device)
            out[r] = {
                "job_ms": round(1e3 * job_s, 2),
                "ms_per_audio_s": round(1e3 * job_s / (r * FRAMES * FRAME_S), 3),
            }
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"variant": name, "capture_s": round(capture_s, 1), "by_rows": out}, streams


def kernel_table(streams: CodecStreams, rows: int, device: torch.device, top: int = 25) -> str:
    from torch.profiler import ProfilerActivity, profile

    group = [streams.new_stream() for _ in range(rows)]
    vocab, k = streams.decoder.cfg.codebook_size, streams.num_quantizers
    frames = torch.randint(0, vocab, (rows, FRAMES, k)).tolist()
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        for _ in range(3):
            streams.decode(group, frames)
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                streams.decode(group, frames)
    return prof.key_averages().table(
        sort_by="cuda_time_total", row_limit=top, max_name_column_width=70
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="8,28,64", help="comma-separated job sizes")
    parser.add_argument("--jobs", type=int, default=30, help="jobs timed a size")
    parser.add_argument("--profile-rows", type=int, default=28)
    parser.add_argument(
        "--variants", default="float32,tf32-matmul,snake-compiled", help="comma-separated"
    )
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = [int(r) for r in args.rows.split(",")]
    t0 = time.perf_counter()
    torch.manual_seed(0)
    base = random_decoder(SPEECH_TOKENIZER["decoder_config"], seed=0).to(device).eval()
    print(f"decoder built in {time.perf_counter() - t0:.1f} s", flush=True)
    baseline = None
    for name in args.variants.split(","):
        result, streams = variant(name, base, device, rows, args.jobs)
        print(json.dumps(result), flush=True)
        if baseline is None:
            baseline = streams
    if baseline is not None:
        print(kernel_table(baseline, args.profile_rows, device), flush=True)


if __name__ == "__main__":
    main()
