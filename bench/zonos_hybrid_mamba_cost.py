"""Cost of the Zonos v0.1 hybrid's Mamba2 layers in a decode step, and of a prompt's prefill
through them, against the batch size: the plain-PyTorch mixer (models/layers/mamba2.py) at the
published sizes (d_model 2048, 34 Mamba2 layers, both CFG rows per request) with random weights,
reading and writing each request's state in the state pool as the engine's steps do. Attention
layers, heads and the codec are not included: this is the part mamba-ssm's kernels would
replace.

    PYTHONPATH=$PWD python bench/zonos_hybrid_mamba_cost.py --device cuda --batches 1 8 32 64
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from models.recurrent_state import RecurrentStatePool
from models.zonos.config import REAL_HYBRID
from models.zonos.hybrid import CFG_ROWS, MambaBlock, mamba_layer, state_specs


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def measure(device: torch.device, dtype: torch.dtype, batch: int, prompt: int, steps: int):
    s = REAL_HYBRID.backbone
    n_mamba = s.n_layer - len(s.attention_layers)
    torch.manual_seed(0)
    block = MambaBlock(s, s.ssm).to(device, dtype).eval()  # one layer's weights, used 34 times
    pool = RecurrentStatePool(n_mamba, state_specs(s.ssm, dtype), device, capacity=batch)
    ids = [f"r{i}" for i in range(batch)]
    x = torch.randn(prompt, CFG_ROWS, s.d_model, device=device, dtype=dtype)
    _sync(device)
    start = time.perf_counter()
    for rid in ids:  # each prompt alone, as a prefill chunk
        pool.begin_step([rid], [0], [prompt])
        for layer in range(n_mamba):
            mamba_layer(block.mixer, x, pool, layer, pool.step)
    _sync(device)
    prefill_s = (time.perf_counter() - start) / batch
    token = torch.randn(batch, CFG_ROWS, s.d_model, device=device, dtype=dtype)
    times = []
    for i in range(steps):
        pool.begin_step(ids, [prompt + i] * batch, [1] * batch)
        _sync(device)
        t0 = time.perf_counter()
        for layer in range(n_mamba):
            mamba_layer(block.mixer, token, pool, layer, pool.step)
        _sync(device)
        times.append(time.perf_counter() - t0)
    times = sorted(times[2:])  # the first steps warm up
    return {
        "batch": batch,
        "prompt_tokens": prompt,
        "prefill_ms_per_request": 1e3 * prefill_s,
        "decode_step_ms_median": 1e3 * times[len(times) // 2],
        "state_mib_per_request": pool.bytes_per_request / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", default=None, help="write the rows as JSON here too")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    rows = [measure(device, dtype, b, args.prompt, args.steps) for b in args.batches]
    for row in rows:
        print(json.dumps(row))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": str(device), "dtype": args.dtype, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
