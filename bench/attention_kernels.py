"""Paged decode attention kernels on one layer of Orpheus-3B's shape (GPU).

    python bench/attention_kernels.py --batch 256 --context 1300

One decode step's attention for `--batch` requests whose contexts are `--context` tokens,
on pages scattered over the cache as the block manager leaves them. Each candidate runs the
same queries over the same K/V (cast to fp8 e4m3 for the fp8 rows, scale 1) and is checked
against FlashInfer's bf16 output. Prints JSON per kernel: µs per call (CUDA events over
replays of a captured graph where the kernel allows capture, else plain launches), the KV
bytes read, the fraction of the measured copy bandwidth that is, and the max error.

Candidates: FlashInfer's batch decode (tensor cores, the engine's kernel today) in bf16 and
with an fp8 cache; XQA (TensorRT-LLM's decode kernels, shipped in FlashInfer) in bf16 and
with an fp8 cache, which on Hopper runs its own fp8 kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch
from step_time import copy_bandwidth  # bench/ is on sys.path when this script runs


def time_call(fn, reps: int) -> float:
    """Mean µs of fn() over `reps` calls, from a captured CUDA graph when capture works."""
    fn()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run = graph.replay
    except Exception:  # noqa: BLE001 - a kernel that cannot be captured is timed eagerly
        torch.cuda.synchronize()
        run = fn
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--context", type=int, default=1300)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--q-heads", type=int, default=24)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument(
        "--table-width",
        type=int,
        default=0,
        help="XQA page-table columns (0: just the context's pages; the engine sizes it for "
        "the model's longest context)",
    )
    ap.add_argument("--kernels", default="flashinfer,flashinfer-fp8,xqa,xqa-fp8")
    args = ap.parse_args()

    import flashinfer
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    device = torch.device("cuda")
    torch.manual_seed(0)
    b, ctx, ps = args.batch, args.context, args.page_size
    hq, hkv, d = args.q_heads, args.kv_heads, args.head_dim
    pages_per_seq = math.ceil(ctx / ps)
    num_pages = b * pages_per_seq + 1
    order = torch.randperm(num_pages - 1, device=device).to(torch.int32)
    tables = order.view(b, pages_per_seq)
    width = max(args.table_width, pages_per_seq)
    wide = torch.full((b, width), num_pages - 1, dtype=torch.int32, device=device)
    wide[:, :pages_per_seq] = tables
    k = torch.randn(num_pages, ps, hkv, d, dtype=torch.bfloat16, device=device)
    v = torch.randn_like(k)
    q = torch.randn(b, hq, d, dtype=torch.bfloat16, device=device)
    caches = {"bf16": (k, v), "fp8": (k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn))}
    workspace = torch.zeros(256 * 2**20, dtype=torch.uint8, device=device)
    indptr = torch.arange(0, b + 1, dtype=torch.int32) * pages_per_seq
    indices = tables.flatten().cpu()
    last = torch.full((b,), ctx - (pages_per_seq - 1) * ps, dtype=torch.int32)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    scale = 1 / math.sqrt(d)

    def flashinfer_call(cache_dtype: str):
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=True
        )
        kv = caches[cache_dtype]
        wrapper.plan(
            indptr, indices, last, hq, hkv, d, ps,
            q_data_type=torch.bfloat16, kv_data_type=kv[0].dtype,
        )  # fmt: skip
        return lambda: wrapper.run(q, kv)

    def xqa_call(cache_dtype: str):
        kv = caches[cache_dtype]
        out = torch.empty_like(q)
        xqa_ws = torch.zeros(256 * 2**20, dtype=torch.uint8, device=device)
        return lambda: xqa_batch_decode_with_kv_cache(
            q, kv, xqa_ws, wide, seq_lens, width * ps,
            bmm1_scale=scale, bmm2_scale=1.0, out=out,
        )  # fmt: skip

    builders = {
        "flashinfer": lambda: flashinfer_call("bf16"),
        "flashinfer-fp8": lambda: flashinfer_call("fp8"),
        "xqa": lambda: xqa_call("bf16"),
        "xqa-fp8": lambda: xqa_call("fp8"),
    }
    bandwidth = copy_bandwidth(device)
    reference = flashinfer_call("bf16")().float()
    report = {
        "gpu": torch.cuda.get_device_name(),
        "batch": b, "context": ctx, "page_size": ps, "q_heads": hq, "kv_heads": hkv,
        "head_dim": d, "copy_bandwidth_GBps": bandwidth / 1e9, "kernels": [],
    }  # fmt: skip
    for name in args.kernels.split(","):
        row: dict = {"kernel": name}
        try:
            t0 = time.perf_counter()
            fn = builders[name]()
            out = fn()
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 1)  # includes any JIT build
            row["max_abs_err"] = (out.float() - reference).abs().max().item()
            row["us"] = time_call(fn, args.reps)
            itemsize = 1 if name.endswith("fp8") else 2
            kv_bytes = 2 * b * ctx * hkv * d * itemsize
            row["kv_GB"] = kv_bytes / 1e9
            row["fraction_of_bandwidth"] = kv_bytes / (row["us"] * 1e-6) / bandwidth
        except Exception as exc:  # noqa: BLE001 - report the kernel that failed, go on
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        print(json.dumps(row), flush=True)
        report["kernels"].append(row)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
