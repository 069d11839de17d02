"""Per-chunk cost of the streaming flow + HiFT detokenizer against the chunk's index.

Builds CosyVoice 2's flow and HiFT from the tiny or the real configuration, or Chatterbox's
S3Gen at its real size (`--size chatterbox`: full attention, 12 mid blocks), with seeded random
weights (no checkpoint needed), streams `--chunks` chunks of random speech tokens through
`FlowHiftDetokenizer` one chunk per call for `--batch` requests at once, and prints the wall
time of each call. A detokenizer whose cost grows with the utterance shows it here.

    PYTHONPATH=$PWD python bench/flow_hift_chunk_cost.py --size tiny --chunks 12
    PYTHONPATH=$PWD python bench/flow_hift_chunk_cost.py --size real --chunks 8 --batch 8 \
        --device cuda --bf16 --graphs
    PYTHONPATH=$PWD python bench/flow_hift_chunk_cost.py --size real --chunks 4 --stages
    PYTHONPATH=$PWD python bench/flow_hift_chunk_cost.py --size real --chunks 8 --batch 8 \
        --device cuda --bf16 --graphs --compile   # the estimator's blocks through torch.compile first
    PYTHONPATH=$PWD python bench/flow_hift_chunk_cost.py --size chatterbox --chunks 8 --batch 8 \
        --device cuda --graphs [--bf16]   # Chatterbox's S3Gen, float32 + TF32 or bf16 flow

`--stages` (eager only) splits each call into the flow's conditioning encoder, its Euler
solver (10 steps x 2 estimator passes for CFG) and HiFT: what a cheaper detokenizer must cut.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from models.chatterbox.s3gen import REAL_S3GEN
from models.chatterbox.s3gen_stream import CHUNK_TOKENS
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import REAL_SIZES, TINY_SIZES, cosyvoice2_yaml


def build(size: str, device: str, dtype: torch.dtype, **detok_args) -> FlowHiftDetokenizer:
    """The detokenizer with its flow in `dtype` and HiFT in float32, as the families serve."""
    if size == "chatterbox":
        flow_cfg, hift_cfg, chunk = REAL_S3GEN.flow_config(), REAL_S3GEN.hift_config(), CHUNK_TOKENS
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "cosyvoice2.yaml"
            path.write_text(cosyvoice2_yaml(TINY_SIZES if size == "tiny" else REAL_SIZES))
            cfg = parse_config(read_yaml(path))
        flow_cfg, hift_cfg, chunk = cfg.flow, cfg.hift, cfg.chunk_size
    torch.manual_seed(0)
    flow, hift = CausalFlow(flow_cfg).eval(), HiFTGenerator(hift_cfg).eval()
    hift.fold_weight_norm()
    flow.to(device, dtype)
    hift.to(device)
    return FlowHiftDetokenizer(flow, hift, chunk, **detok_args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=["tiny", "real", "chatterbox"], default="tiny")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-chunks", type=int, default=0, help="voice prompt length (0: preset)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="the flow in bf16 (HiFT stays float32)")
    ap.add_argument("--graphs", action="store_true", help="CUDA: capture the solver as serve does")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="with --graphs: the estimator's blocks through torch.compile before capture (--compile-codec)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    ap.add_argument("--stages", action="store_true", help="time encoder, solver, HiFT (eager)")
    args = ap.parse_args()
    if args.stages and args.graphs:
        ap.error("--stages times the window's eager stages; a graph replay runs them as one")
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    if args.compile and not args.graphs:
        ap.error("--compile compiles what --graphs captures: add --graphs")
    detok = build(args.size, args.device, dtype)
    if args.graphs:
        from engine.cuda_graphs import CallableGraphs

        detok.cover_prompt(args.prompt_chunks)  # as a voice of this length does at load
        began = time.perf_counter()
        detok.enable_cuda_graphs(CallableGraphs(torch.device(args.device), compiled=args.compile))
        print(f"captured the solver graphs in {time.perf_counter() - began:.1f} s")
    stages = timed_stages(detok, args.device) if args.stages else None
    chunk, g = detok.chunk, torch.Generator().manual_seed(1)
    n_mels = detok.flow.cfg.output_size
    e = detok.flow.cfg.spk_embed_dim
    states = [
        detok.new_stream(
            torch.randint(0, 6561, (chunk * args.prompt_chunks,), generator=g).tolist(),
            torch.randn(2 * chunk * args.prompt_chunks, n_mels, generator=g),
            torch.randn(e, generator=g),
        )
        for _ in range(args.batch)
    ]
    tokens = torch.randint(0, 6561, (args.batch, chunk * args.chunks + 3), generator=g).tolist()
    print(f"{args.size} batch {args.batch} prompt {args.prompt_chunks} chunks on {args.device}")
    # CPU time is the steadier measure on a shared CPU (other processes stretch wall time).
    print("chunk  wall_ms  cpu_ms" + ("  encoder_ms  solver_ms  hift_ms" if stages else ""))
    for c in range(args.chunks):
        for s, toks in zip(states, tokens, strict=True):
            lo = 0 if c == 0 else chunk * c + 3
            detok.push(s, toks[lo : chunk * (c + 1) + 3])
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        detok.decode(states, [False] * args.batch)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        line = f"{c:5d}  {1000 * wall:7.0f}  {1000 * cpu:6.0f}"
        if stages is not None:
            line += "".join(f"  {1000 * stages.pop(k, 0.0):10.0f}" for k in ("encoder", "solver"))
            line += f"  {1000 * stages.pop('hift', 0.0):7.0f}"
        print(line, flush=True)


def timed_stages(detok: FlowHiftDetokenizer, device: str) -> dict[str, float]:
    """Wrap the detokenizer's three stages so each call adds its wall time (synchronized on a
    GPU) to the returned dict, under encoder / solver / hift."""
    totals: dict[str, float] = {}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def wrap(owner, name: str, key: str) -> None:
        inner = getattr(owner, name)

        def timed(*a, **k):
            sync()
            t0 = time.perf_counter()
            out = inner(*a, **k)
            sync()
            totals[key] = totals.get(key, 0.0) + time.perf_counter() - t0
            return out

        setattr(owner, name, timed)

    wrap(detok.flow, "condition", "encoder")
    wrap(detok.flow, "solve_euler", "solver")
    wrap(detok, "_hift_step", "hift")
    return totals


if __name__ == "__main__":
    main()
