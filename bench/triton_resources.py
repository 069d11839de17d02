"""What SNAC's Triton kernels (models/codecs/snac_triton.py) take of an H100/H200's SM, without
a GPU: each kernel compiled for sm_90 by Triton here, then Triton's own ptxas reports its
registers a thread, spilled bytes and shared memory (a JSON line a kernel and tile). A tile that spills or needs more shared
memory than the SM has (227 KB) is slow or does not launch; TAPS_MIX_CONFIGS keeps to tiles
that do neither.

    PYTHONPATH=.ref/triton-interpreter python bench/triton_resources.py [--dtype fp16]

(`make reference-deps` puts Triton in .ref/triton-interpreter; the GPU machine has its own.)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from models.codecs import snac_triton as K

HOPPER = GPUTarget("cuda", 90, 32)
WIDTHS = (64, 128, 256, 512)  # SNAC 24 kHz's residual units
UPSAMPLINGS = ((512, 8), (256, 8), (128, 4), (64, 2))  # its noise blocks' widths, strides
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def resources(fn, signature: dict, constants: dict, **options) -> dict:
    """Registers a thread, spilled bytes (stores) and shared memory of `fn` compiled for sm_90."""
    signature = {**signature, **dict.fromkeys(constants, "constexpr")}
    kernel = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constants),
        target=HOPPER,
        options=options,
    )
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(kernel.asm["ptx"])
        report = subprocess.run(
            [str(PTXAS), "-arch=sm_90a", "-v", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    return {
        "registers": int(re.search(r"Used (\d+) registers", report).group(1)),
        "spilled": int(re.search(r"(\d+) bytes spill stores", report).group(1)),
        "shared": kernel.metadata.shared,
    }


def tile_resources(fn, signature: dict, constants: dict, config) -> dict:
    """A tuning tile's settings (a triton.Config) and what `fn` compiled with them uses."""
    used = resources(
        fn,
        signature,
        {**constants, **config.kwargs},
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return {**config.kwargs, "warps": config.num_warps, "stages": config.num_stages, **used}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    args = ap.parse_args()
    ptr = f"*{args.dtype}"
    mix = dict.fromkeys(
        ("joined_ptr", "x_ptr", "skip_state_ptr", "tap_weight_ptr", "tap_bias_ptr", "alpha_ptr")
        + ("mix_weight_ptr", "mix_bias_ptr", "out_ptr"),
        ptr,
    )
    mix["n"] = mix["rows_class"] = "i32"
    for width in WIDTHS:
        for config in K.TAPS_MIX_CONFIGS:
            if config.kwargs["BLOCK_CO"] > width:
                continue
            constants = {
                "C": width,
                "DILATION": 9,
                "TAPS": 7,
                "HAS_TAP_BIAS": True,
                "HAS_MIX_BIAS": True,
                "PRECISION": "tf32" if args.dtype == "fp32" else "ieee",
            }
            tile = tile_resources(K._unit_taps_mix, mix, constants, config)
            print(json.dumps({"kernel": "_unit_taps_mix", "width": width, **tile}))
    noise = dict.fromkeys(
        ("z_ptr", "bias_ptr", "noise_weight_ptr", "out_ptr"),
        ptr,
    )
    noise.update(seed_ptr="*i64", start_ptr="*i64", n="i32", rows_class="i32")
    for width, stride in UPSAMPLINGS:
        for config in K.TAPS_MIX_CONFIGS:
            if config.kwargs["BLOCK_CO"] > width:
                continue
            constants = {
                "SALT": 0,
                "C": width,
                "S": stride,
                "HAS_BIAS": True,
                "PRECISION": "tf32" if args.dtype == "fp32" else "ieee",
            }
            tile = tile_resources(K._upsample_noise, noise, constants, config)
            print(
                json.dumps({"kernel": "_upsample_noise", "width": width, "stride": stride, **tile})
            )
    join = dict.fromkeys(
        ("x_ptr", "kept_ptr", "skip_state_ptr", "alpha_ptr", "joined_ptr", "new_skip_ptr"),
        ptr,
    )
    join.update(start_ptr="*i64", end_ptr="*i64", C="i32", n="i32")
    # A residual unit's (dilation 9: 54 kept, 27 of skip line), and a Snake's before a conv.
    for kept, half, warps in ((54, 27, 4), (6, 0, K.SNAKE_JOIN_WARPS)):
        constants = {"KEPT": kept, "HALF": half, "BLOCK": K.JOIN_BLOCK}
        used = resources(K._join, join, constants, num_warps=warps)
        print(json.dumps({"kernel": "_join", "kept": kept, "half": half, **used}))


if __name__ == "__main__":
    main()
