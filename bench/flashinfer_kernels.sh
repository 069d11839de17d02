#!/usr/bin/env bash
# Compiles the FlashInfer JIT modules the engine uses on the H200 (sm_90a) HERE, on the CPU
# machine with nvcc, and packs them into .gpu/aot.txz in `save_kernels`' layout
# (bench/gpu_setup.sh: `<name>/<name>.so`, unpacked into flashinfer/data/aot on the GPU
# machine, where FlashInfer loads them instead of compiling).
#
# Why: .gpu/ is git-ignored, so a new checkout has no aot.txz, and the lent GPU machine then
# spends minutes of scarce device time compiling these modules at its first server start. Run
# this before the session's first GPU call instead (after bench/gpu_carry.sh serve):
#
#     bench/flashinfer_kernels.sh                # .gpu/aot.txz (merged with one already there)
#     bench/flashinfer_kernels.sh /tmp/aot.txz   # elsewhere
#
# Here (2 cores) the whole list takes ~18 minutes: ~16 compiling (the two prefill modules are
# most of it), ~1.5 for a fresh venv and headers. Modules the archive already holds are not
# built again (their copies are kept), and FlashInfer's build folder ($WORK) is kept, so a
# re-run rebuilds nothing unchanged.
# The GPU machine's JIT builds the same: the same flashinfer-python (bench/gpu_carry.sh), the
# same generators and flags, nvcc 13.0.88 on both machines (its cubins say "release 13.0,
# V13.0.88"); checked against modules it compiled: same names, same tvm-ffi exports,
# byte-identical sm_90a kernel code. The one difference: its .so files carry a static copy of
# libstdc++ (~2 MB each) where these load the system's libstdc++.so.6. Python and torch versions
# do not matter: the modules are tvm-ffi C-ABI libraries that link neither.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCHIVE=$(realpath -m "${1:-.gpu/aot.txz}")

# One entry a module: `kind:args` as bench/flashinfer_kernels.py maps them to FlashInfer's own
# generators. Orpheus' shapes: head_dim 128, 24 query / 8 KV heads (3 a group), 16-token pages,
# bf16 compute; KV pages bf16 (--kv-cache-dtype auto) or fp8 e4m3 (--kv-cache-dtype fp8).
MODULES=(
    # models/layers/fused_kernels.py: flashinfer.norm.rmsnorm and fused_add_rmsnorm
    # (FLASHINFER_USE_CUDA_NORM=1 picks these CUDA kernels, not CuTe-DSL ones).
    norm
    # models/layers/fused_kernels.py: flashinfer.rope.apply_rope_with_cos_sin_cache_inplace.
    rope
    # models/layers/fused_kernels.py: flashinfer.activation.silu_and_mul.
    act:silu
    # engine/flashinfer_backend.py, bf16 pages: the tensor-core BatchDecodeWithPagedKVCacheWrapper
    # (use_tensor_cores: 3 query heads a KV head) runs decode steps on FlashInfer's fa2 prefill
    # kernel; also a prefill step's BatchPrefillWithPagedKVCacheWrapper where it picks fa2.
    prefill:fa2:bf16:bf16:128
    # engine/flashinfer_backend.py, fp8 pages: BatchPrefillWithPagedKVCacheWrapper for steps
    # with prompt chunks that read the cache (fa3 takes fp8 KV only with fp8 queries, so fa2).
    prefill:fa2:bf16:e4m3:128
    # engine/xqa_decode.py, fp8 pages: flashinfer.decode.xqa_batch_decode_with_kv_cache for
    # decode-only steps (bf16 queries and output, 16-token pages, 3 query heads a KV head).
    xqa:bf16:e4m3:16:128:3
    # Not listed: with bf16 pages, BatchPrefillWithPagedKVCacheWrapper's "auto" picks fa3 on
    # the H200 (module name ending _sm90: prefill:fa3:bf16:bf16:128 here) for eager steps that
    # read the cache; fresh prompts run as prompt graphs (engine/prompt_graphs.py) without it.
    # Not yet built or checked here.
)

FLASHINFER=flashinfer-python==0.6.18.post1  # as bench/gpu_carry.sh carries to the GPU machine
TVM_FFI=apache-tvm-ffi==0.1.15.post2
VENV=${VENV:-/tmp/flashinfer-kernels/venv}   # scratch: not the project's .venv
WORK=${WORK:-/tmp/flashinfer-kernels/build}  # FlashInfer's JIT cache and build objects
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}

# A venv with FlashInfer's Python side: its JIT generators write the same ninja files the GPU
# machine's do. torch only gives dtypes and its C++ ABI flag, so the local CPU wheel does;
# flashinfer's other requirements (cuDNN frontend, CUTLASS DSL, NCCL, ...) are not imported
# by the JIT, hence --no-deps and the few small packages it does import.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import flashinfer' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 ninja numpy requests einops nvidia-ml-py click \
        tabulate packaging tqdm
    "$VENV/bin/pip" install -q --no-deps "$FLASHINFER" "$TVM_FFI"
fi

# The XQA module links -lcuda (the driver API), which has no library on a machine without a
# driver: a stub that defines each cu* function of cuda.h, named libcuda.so.1 like the driver's,
# so the module records the same NEEDED entry. It is only linked against, never loaded.
STUB=$WORK/libcuda-stub
if [ ! -f "$STUB/libcuda.so" ]; then
    mkdir -p "$STUB"
    grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$CUDA_HOME/include/cuda.h" | sort -u \
        | sed 's/.*/int &(void) { return 999; }/' > "$STUB/libcuda.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB/libcuda.so" "$STUB/libcuda.c"
fi

# Headers the GPU machine's CUDA has and this one's lacks: norm.cu includes FlashInfer's
# trtllm/common headers, which include cublasLt.h, cublas_v2.h and curand_kernel.h (only
# declarations are used: no module links cuBLAS or cuRAND). From the wheels of CUDA 13.0's
# cuBLAS and cuRAND (~480 MB, downloaded once, only include/ kept).
HEADERS=$WORK/cuda-headers
if [ ! -f "$HEADERS/curand_kernel.h" ] || [ ! -f "$HEADERS/cublasLt.h" ]; then
    rm -rf "$WORK/wheels" && mkdir -p "$HEADERS"
    "$VENV/bin/pip" download -q --no-deps -d "$WORK/wheels" nvidia-cublas==13.1.0.3 \
        nvidia-curand==10.4.0.35
    for wheel in "$WORK"/wheels/*.whl; do
        unzip -q -o -j "$wheel" 'nvidia/cu13/include/*' -d "$HEADERS"
    done
    rm -rf "$WORK/wheels"
fi

# What the GPU machine's JIT would do on an H200 (compute capability 9.0 → sm_90a), with its
# cache under $WORK. --as-needed: Ubuntu's linker default there (the modules list only the
# libraries they use, libcuda.so.1 only XQA's); Debian's here links every one named.
export FLASHINFER_CUDA_ARCH_LIST="9.0a" FLASHINFER_WORKSPACE_BASE=$WORK MAX_JOBS=$(nproc)
export CXX="c++ -Wl,--as-needed" FLASHINFER_EXTRA_LDFLAGS="-L$STUB" PATH=$VENV/bin:$PATH
export FLASHINFER_EXTRA_CUDAFLAGS="-isystem $HEADERS" FLASHINFER_EXTRA_CFLAGS="-isystem $HEADERS"
PY=("$VENV/bin/python" bench/flashinfer_kernels.py)

# Merge: unpack the archive there is; build only the modules it lacks (its own are kept).
PACK=$(mktemp -d)
trap 'rm -rf "$PACK"' EXIT
[ -f "$ARCHIVE" ] && tar -C "$PACK" -xJf "$ARCHIVE"
mapfile -t NAMES < <("${PY[@]}" names "${MODULES[@]}")
TODO=()
for i in "${!MODULES[@]}"; do
    [ -f "$PACK/${NAMES[$i]}/${NAMES[$i]}.so" ] || TODO+=("${MODULES[$i]}")
done
if [ ${#TODO[@]} -eq 0 ]; then
    echo "$ARCHIVE already holds all ${#MODULES[@]} modules"
    exit 0
fi
start=$SECONDS
"${PY[@]}" build "$PACK" "${TODO[@]}" > "$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/build.log"; echo "build failed: $WORK/build.log" >&2; exit 1; }
echo "built ${#TODO[@]} modules in $((SECONDS - start)) s (log: $WORK/build.log)"

# Packed as save_kernels packs (tar -C dir -cJf ... .), through a temporary name so a cut run
# leaves the old archive whole.
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$PACK" -cJf "$ARCHIVE.tmp" . && mv "$ARCHIVE.tmp" "$ARCHIVE"
ls -l "$ARCHIVE"
tar -tJf "$ARCHIVE" | grep '\.so$'
