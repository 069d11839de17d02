"""Linear layers in float8 for GPU serving (`voxgate serve --fp8-weights`).

A decode step at Orpheus' batch sizes reads every weight once and does little arithmetic on
it, so its GEMMs cost the weights' bytes: 5.6 GB of bf16 layer weights a step for Orpheus-3B,
~1.3 ms at the H200's bandwidth and 2.25 ms measured under load (BENCHMARKS.md). Stored as
float8 e4m3 they are half the bytes, and Hopper's fp8 tensor cores do twice the arithmetic at
the larger batches.

The scheme is the common dynamic one: each weight row (output channel) gets a float32 scale
at load (its largest magnitude maps to e4m3's 448), each activation row (token) a scale
computed from its own largest magnitude at run time, and `torch._scaled_mm` multiplies the
two float8 operands with both scales into the model's dtype. Nothing is calibrated, so any
checkpoint can be served this way; the outputs move by float8 rounding (~2-3 % of a value
relative, less after the sums; the tests bound it), so tokens may differ from bf16's.

The activation's quantisation is a row reduction and a cast: on CUDA it is compiled
(Inductor fuses it into one kernel, which a decode step's CUDA graph then replays beside the
GEMM; unfused it would add four launches to each of a step's ~112 GEMMs). Where compiling
fails it runs as plain torch ops, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import nn

log = logging.getLogger("voxgate.models")

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value
_SMALLEST_AMAX = 1e-6  # a row of zeros still gets a usable scale


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (x in float8 [M, K], each row's float32 scale [M, 1]): x ≈ q * scale."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=_SMALLEST_AMAX)
    scale = amax / FP8_MAX
    q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale


class _RowQuantizer:
    """quantize_rows, compiled on first use on CUDA (eager on the CPU, or where the compile
    fails: a machine without a working Triton)."""

    def __init__(self) -> None:
        self._compiled = None
        self._failed = False

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.device.type != "cuda" or self._failed:
            return quantize_rows(x)
        if self._compiled is None:
            self._compiled = torch.compile(quantize_rows, dynamic=True, fullgraph=True)
        try:
            return self._compiled(x)
        except Exception as error:  # noqa: BLE001 - any compiler failure: run the plain ops
            self._failed = True
            first_line = (str(error).strip().splitlines() or [""])[0][:300]
            log.warning(
                "compiling the fp8 activation quantisation failed (%s: %s); it runs as "
                "separate kernels, which costs each step more",
                type(error).__name__,
                first_line,
            )
            return quantize_rows(x)


_QUANTIZE = _RowQuantizer()


class Fp8Linear(nn.Module):
    """An nn.Linear whose weight is float8 with a scale per output channel; the input is
    quantised per row at each call. Output in the input's dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w_q, w_scale = quantize_rows(weight)
        self.register_buffer("weight", w_q)  # [N, K] float8
        self.register_buffer("weight_scale", w_scale.reshape(1, -1))  # [1, N] float32
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        q, scale = _QUANTIZE(x.reshape(-1, self.in_features))
        out = torch._scaled_mm(
            q,
            self.weight.t(),  # [K, N], column-major as _scaled_mm wants its second operand
            scale_a=scale,
            scale_b=self.weight_scale,
            out_dtype=x.dtype,
        )
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8"


def fp8_weights_unsupported(device: torch.device) -> str | None:
    """Why float8 GEMMs cannot run on `device` (None: they can)."""
    if device.type != "cuda":
        return f"float8 weights are for NVIDIA GPUs; this engine runs on {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return (
            f"float8 GEMMs need compute capability 8.9 or newer (Ada, Hopper); this GPU is "
            f"{major}.{minor}"
        )
    return None


def to_fp8_linears(modules: Iterable[nn.Module]) -> int:
    """Replace every nn.Linear inside `modules` with its Fp8Linear, in place; returns how many
    were replaced. Their in and out features must be multiples of 16 (the fp8 GEMM's tiles)."""
    count = 0
    for module in modules:
        for parent in list(module.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, nn.Linear):
                    continue
                if child.in_features % 16 or child.out_features % 16:
                    raise ValueError(
                        f"{name}: float8 GEMMs need features divisible by 16, got "
                        f"{child.in_features} → {child.out_features}"
                    )
                setattr(parent, name, Fp8Linear(child))
                count += 1
    return count
