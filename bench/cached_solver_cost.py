"""The flow's Euler solver per chunk two ways: the streaming detokenizer's bounded window (the
chunk re-integrated with its 2 context chunks: 3 chunks of frames, 1 kept) against the cached
estimator (models/codecs/flow_hift/estimator_cache.py: the chunk's own frames over cached
context). Seeded random weights, CosyVoice 2's tiny or real configuration.

    PYTHONPATH=$PWD python bench/cached_solver_cost.py --size real
    PYTHONPATH=$PWD python bench/cached_solver_cost.py --size real --batch 8 --device cuda --bf16

Prints CPU time on the CPU (steadier than wall on a shared machine), synchronized wall time on
a GPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from models.codecs.flow_hift.estimator_cache import solve_euler_cached
from models.codecs.flow_hift.flow import CausalFlow
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import REAL_SIZES, TINY_SIZES, cosyvoice2_yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=["tiny", "real"], default="tiny")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cosyvoice2.yaml"
        path.write_text(cosyvoice2_yaml(TINY_SIZES if args.size == "tiny" else REAL_SIZES))
        cfg = parse_config(read_yaml(path))
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    flow = CausalFlow(cfg.flow).eval().to(args.device, dtype)
    cuda = args.device.startswith("cuda")

    def clock() -> float:
        if cuda:
            torch.cuda.synchronize()
            return time.perf_counter()
        return time.process_time()

    chunk, m, b = flow.decoder.estimator.chunk, cfg.flow.output_size, args.batch
    g = torch.Generator().manual_seed(0)
    frames = 3 * chunk  # a steady window: 2 context chunks and the chunk
    z, mu = (torch.randn(b, m, frames, generator=g).to(args.device, dtype) for _ in range(2))
    cond = torch.zeros_like(z)
    spks = torch.randn(b, m, generator=g).to(args.device, dtype)
    mask = torch.ones(b, 1, frames, device=args.device, dtype=dtype)
    unit = "wall" if cuda else "cpu"
    print(f"{args.size} batch {b} on {args.device}: chunk = {chunk} frames; ms of {unit} time")
    for _ in range(args.repeats):
        t0 = clock()
        flow.solve_euler(z, mu, mask, spks, cond)
        window = clock() - t0
        caches, cached = None, []
        for c in range(3):
            s = slice(c * chunk, (c + 1) * chunk)
            t0 = clock()
            _, caches = solve_euler_cached(
                flow, z[:, :, s], mu[:, :, s], spks, cond[:, :, s], caches
            )
            cached.append(clock() - t0)
        print(
            f"window (3 chunks, 1 kept) {1000 * window:8.0f}   cached chunk 0 / 1 / 2 "
            + " / ".join(f"{1000 * t:.0f}" for t in cached),
            flush=True,
        )


if __name__ == "__main__":
    main()
