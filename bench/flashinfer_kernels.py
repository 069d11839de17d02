"""Builds FlashInfer JIT modules with nvcc on a machine without a GPU (bench/flashinfer_kernels.sh
runs it in a scratch venv that has flashinfer-python and a CPU torch).

Each argument names one module as `kind:args` (the list lives in bench/flashinfer_kernels.sh);
this maps it to FlashInfer's own generator, so the module's name, sources and flags are those
the GPU machine's flashinfer would JIT-compile at run time. The target architecture comes from
FLASHINFER_CUDA_ARCH_LIST (the script sets "9.0a", the H200), not from a device. All specs
build in one ninja run (MAX_JOBS in parallel); each built `<name>.so` is then copied to
`OUT/<name>/<name>.so`, the layout of FlashInfer's AOT folder that `save_kernels`
(bench/gpu_setup.sh) packs.

    python bench/flashinfer_kernels.py names norm act:silu ...   # each entry's module name
    python bench/flashinfer_kernels.py build OUT norm act:silu ...
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}


def spec_for(entry: str):
    from flashinfer.jit import activation, norm, rope, xqa
    from flashinfer.jit.attention import modules

    kind, *args = entry.split(":")
    if kind == "norm":
        return norm.gen_norm_module()
    if kind == "rope":
        return rope.gen_rope_module()
    if kind == "act":  # act:silu → silu_and_mul
        return activation.gen_act_and_mul_module(args[0])
    if kind == "prefill":  # prefill:BACKEND:Q:KV:HEAD_DIM (output in q's dtype, int32 indices)
        backend, q, kv, head_dim = args
        # The arguments BatchPrefillWithPagedKVCacheWrapper.plan and the tensor-core
        # BatchDecodeWithPagedKVCacheWrapper.plan pass for a causal step with no positional
        # encoding in the kernel, no sliding window, no logits cap, fp32 QK reduction.
        return modules.gen_batch_prefill_module(
            backend, DTYPES[q], DTYPES[kv], DTYPES[q], torch.int32,
            int(head_dim), int(head_dim), 0, False, False, False,
        )  # fmt: skip
    if kind == "xqa":  # xqa:Q:KV:PAGE_SIZE:HEAD_DIM:Q_HEADS_PER_KV_HEAD (output in q's dtype)
        q, kv, page, head_dim, group = args
        return xqa.gen_xqa_module(
            DTYPES[q], DTYPES[kv], int(page), int(head_dim), int(group), False, DTYPES[q]
        )
    raise SystemExit(f"unknown module kind {kind!r} in {entry!r}")


def main() -> None:
    if sys.argv[1] == "names":
        for entry in sys.argv[2:]:
            print(spec_for(entry).name)
        return
    if sys.argv[1] != "build":
        raise SystemExit("usage: flashinfer_kernels.py names ENTRY... | build OUT ENTRY...")
    out, entries = Path(sys.argv[2]), sys.argv[3:]
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.core import build_jit_specs

    specs = [spec_for(e) for e in entries]
    for entry, spec in zip(entries, specs, strict=True):
        print(f"{entry} -> {spec.name}", flush=True)
    print(f"building in {jit_env.FLASHINFER_JIT_DIR}", flush=True)
    start = time.monotonic()
    build_jit_specs(specs, verbose=True, skip_prebuilt=False)
    print(f"built {len(specs)} modules in {time.monotonic() - start:.0f} s", flush=True)
    for spec in specs:
        dest = out / spec.name / f"{spec.name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(spec.jit_library_path, dest)
        print(f"{dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
