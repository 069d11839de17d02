#!/usr/bin/env bash
# Builds .gpu/ (git-ignored): the Python packages a call to the lent GPU machine needs and its
# image lacks (it has torch, numpy, safetensors, tokenizers, requests, protobuf; no registry),
# each wheel unzipped into one folder and packed as one xz tarball, because a call carries at
# most 64 MiB. On the machine, `. bench/gpu_setup.sh` unpacks it (BENCHMARKS.md, "Next GPU
# session").
#
#   bench/gpu_carry.sh serve   # .gpu/site.txz: serving + FlashInfer + transformers (~40 MB)
#   bench/gpu_carry.sh ray     # .gpu/site-ray.txz: serving on the CPU + Ray without its Java,
#                              # RLlib, Data, Serve, Tune and Train parts (~40 MB)
#   bench/gpu_carry.sh ray-addon  # .gpu/ray.txz: Ray alone, unpacked beside site.txz, for
#                              # --replicas / --gateway-processes on the GPU; carried in a
#                              # later call than site.txz (the machine keeps what an earlier
#                              # call unpacked while it stays warm), since both exceed 64 MiB
#   bench/gpu_carry.sh zonos   # .gpu/zonos.txz: what Zonos reads text with, which the
#                              # machine lacks: the phonemizer package and eSpeak NG (~4 MB)
set -euo pipefail
PROFILE=${1:-serve}
cd "$(dirname "$0")/.."

SERVING="av==18.1.0 starlette==1.10.0 anyio==4.16.0 sniffio==1.3.1 uvicorn==0.54.0 h11==0.16.0
  click==8.5.1 websockets==17.4 webrtcvad-wheels==2.0.14.post1 prometheus-client==0.26.0
  PyYAML==6.0.4 snac==1.2.1 einops==0.8.2"
case "$PROFILE" in
  serve) PKGS="$SERVING transformers==5.24.0 flashinfer-python==0.6.18.post1
           apache-tvm-ffi==0.1.15.post2"; OUT=.gpu/site.txz ;;
  ray-addon) PKGS="ray==2.60.0 filelock==4.3.1 jsonschema==4.26.0 referencing==0.37.0
         jsonschema-specifications==2025.9.1 rpds-py==2026.9.1 attrs==26.1.0 msgpack==1.2.4
         aiohappyeyeballs aiosignal frozenlist multidict propcache yarl idna"
       OUT=.gpu/ray.txz ;;
  ray) PKGS="$SERVING ray==2.60.0 filelock==4.3.1 jsonschema==4.26.0 referencing==0.37.0
         jsonschema-specifications==2025.9.1 rpds-py==2026.9.1 attrs==26.1.0 msgpack==1.2.4
         aiohappyeyeballs aiosignal frozenlist multidict propcache yarl idna"
       OUT=.gpu/site-ray.txz ;;
  zonos) exec bench/gpu_carry_espeak.sh ;;
  *) echo "usage: bench/gpu_carry.sh serve|ray|ray-addon|zonos" >&2; exit 2 ;;
esac

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The machine's Python is 3.12; pip matches each manylinux tag exactly, so name several.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WORK/wheels" $PKGS
mkdir -p "$WORK/site" .gpu
for wheel in "$WORK"/wheels/*.whl; do unzip -q -o "$wheel" -d "$WORK/site"; done
tar -C "$WORK/site" --exclude=ray/jars --exclude=ray/rllib --exclude=ray/data \
  --exclude=ray/serve --exclude=ray/tune --exclude=ray/train --exclude='*/tests' \
  -cf - . | xz -6 -T0 > "$OUT"
ls -l "$OUT"
