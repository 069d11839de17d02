"""A decode step's fp8 KV writes: six kernels a layer against the engine's one (GPU).

    python bench/kv_write.py --rows 128,272,320

engine/attention.py's `store_kv` writes k (then v) rows into an fp8 cache as a clamp, a cast
and a byte-wise index_copy: three ~3-µs kernels each (`engine_us_per_step`, the engine's
writes before `store_kv_pair`). `store_kv_pair`, what the engine runs on a GPU, compiles k's
and v's into one Triton kernel a layer (`fused_us_per_step`). This times both in a CUDA graph
of all the layers' writes at Orpheus-3B's shapes (8 KV heads × 128, 16-token pages), checks
that both leave the same bytes in the cache, and prints µs a step for each.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
from graph_timing import replay_us

from engine.attention import store_kv, store_kv_pair

FP8 = torch.float8_e4m3fn


def engine_writes(caches, slots, k, v) -> None:
    for k_cache, v_cache in caches:
        store_kv(k_cache, slots, k)
        store_kv(v_cache, slots, v)


def fused_writes(caches, slots, k, v) -> None:
    for k_cache, v_cache in caches:
        store_kv_pair(k_cache, v_cache, slots, k, v)


def written(caches, slots) -> list[torch.Tensor]:
    """The bytes every layer's k and v caches hold at `slots`."""
    return [c[slots].view(torch.uint8).clone() for pair in caches for c in pair]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="128,272,320")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--pages", type=int, default=40_000, help="16-token pages in each cache")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    shape = (args.pages * 16, args.kv_heads, args.head_dim)
    caches = [
        (torch.zeros(shape, dtype=FP8, device=device), torch.zeros(shape, dtype=FP8, device=device))
        for _ in range(args.layers)
    ]
    out = []
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            slots = torch.randperm(shape[0], device=device)[:rows]
            k, v = (
                torch.randn(rows, args.kv_heads, args.head_dim, device=device, dtype=torch.bfloat16)
                * 100
                for _ in range(2)
            )

            engine_us = replay_us(partial(engine_writes, caches, slots, k, v), args.reps)[0]
            expected = written(caches, slots)
            for pair in caches:
                for c in pair:
                    c.zero_()
            fused_us = replay_us(partial(fused_writes, caches, slots, k, v), args.reps)[0]
            same = all(
                torch.equal(a, b) for a, b in zip(expected, written(caches, slots), strict=True)
            )
            row = {
                "rows": rows,
                "engine_us_per_step": round(engine_us, 1),
                "fused_us_per_step": round(fused_us, 1),
                "same_bytes": same,
            }
            print(json.dumps(row), flush=True)
            out.append(row)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": out}))


if __name__ == "__main__":
    main()
