"""One decoder layer's four GEMMs at a decode step's row counts: bf16 against float8 (GPU).

    python bench/fp8_gemm.py --rows 128,192,256,272,320

At Orpheus' capacity edge the decode step's GEMMs are compute-bound (272 rows: 2.83 ms a step,
~615 TFLOPS, BENCHMARKS.md), and Hopper's float8 tensor cores do twice bf16's arithmetic. An
earlier float8 layer (per-row activation scales, `torch._scaled_mm`'s row-wise path) made the
served step slower at ~110 rows, so this times each scaling on its own before any serving code:

- `bf16`: F.linear, what the engine runs;
- `fp8-rowwise`: a scale per activation row and per weight column (`_scaled_mm` row-wise);
- `fp8-tensorwise`: one scale for the activation and one for the weight (cuBLASLt's float8).

Each variant's activation quantisation (compiled, as serving would run it) is in its time. The
four GEMMs of a layer (qkv, o, gate_up, down at Orpheus-3B's shapes, or `--hidden`/`--ffn`/
`--qkv`) are captured in one CUDA graph and replayed; prints µs a layer, TFLOPS, and each fp8
variant's output error against bf16's (RMS of the difference over RMS of the output).
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
import torch.nn.functional as F
from graph_timing import replay_us

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-6) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def quantize_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax().float().clamp(min=1e-6) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def make_variants(weights: list[torch.Tensor]):
    """name → fn(x_list) running the layer's GEMMs on inputs x_list (one per GEMM)."""
    row_q = torch.compile(quantize_rows, fullgraph=True)
    tensor_q = torch.compile(quantize_tensor, fullgraph=True)
    rowwise = [quantize_rows(w) for w in weights]  # [N, K] fp8, [N, 1] scales
    tensorwise = [quantize_tensor(w) for w in weights]

    def bf16(xs):
        return [F.linear(x, w) for x, w in zip(xs, weights, strict=True)]

    def fp8_rowwise(xs):
        out = []
        for x, (w, w_scale) in zip(xs, rowwise, strict=True):
            q, scale = row_q(x)
            out.append(
                torch._scaled_mm(
                    q, w.t(), scale_a=scale, scale_b=w_scale.t(), out_dtype=torch.bfloat16
                )
            )
        return out

    def fp8_tensorwise(xs):
        out = []
        for x, (w, w_scale) in zip(xs, tensorwise, strict=True):
            q, scale = tensor_q(x)
            out.append(
                torch._scaled_mm(q, w.t(), scale_a=scale, scale_b=w_scale, out_dtype=torch.bfloat16)
            )
        return out

    return {"bf16": bf16, "fp8-rowwise": fp8_rowwise, "fp8-tensorwise": fp8_tensorwise}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="128,192,256,272,320")
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--qkv", type=int, default=5120, help="q + k + v output width")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    h, f = args.hidden, args.ffn
    shapes = [(h, args.qkv), (h, h), (h, 2 * f), (f, h)]  # (K, N): qkv, o, gate_up, down
    weights = [(torch.randn(n, k, device=device) / k**0.5).to(torch.bfloat16) for k, n in shapes]
    variants = make_variants(weights)
    rows = []
    with torch.inference_mode():
        for m in (int(r) for r in args.rows.split(",")):
            xs = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for k, _ in shapes]
            flops = sum(2 * m * k * n for k, n in shapes)
            reference = None
            for name, fn in variants.items():
                us, outs = replay_us(partial(fn, xs), args.reps)
                outs = [o.float() for o in outs]
                row = {"rows": m, "variant": name, "us_per_layer": round(us, 1)}
                row["tflops"] = round(flops / (us * 1e-6) / 1e12)
                if reference is None:
                    reference = outs
                else:
                    err = [
                        ((o - r).pow(2).mean().sqrt() / r.pow(2).mean().sqrt()).item()
                        for o, r in zip(outs, reference, strict=True)
                    ]
                    row["rel_rms_err"] = round(max(err), 4)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}))


if __name__ == "__main__":
    main()
