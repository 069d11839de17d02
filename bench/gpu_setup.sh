# Sourced at the start of a command on the lent GPU machine: `. bench/gpu_setup.sh`.
# Unpacks the carried packages (.gpu/site.txz or .gpu/site-ray.txz, built here by
# bench/gpu_carry.sh) and FlashInfer's kernels compiled by an earlier call (.gpu/aot.tar) into
# /tmp/site, once per machine, and puts them on PYTHONPATH. `save_kernels` (at the end of a
# command) copies the kernels this call compiled to $OUT/aot.tar, to carry next time as
# .gpu/aot.tar. It also puts the checkout on PYTHONPATH and defines `voxgate` (the package is
# not installed on the machine).
mkdir -p /tmp/site
for archive in .gpu/site.txz .gpu/site-ray.txz; do
  stamp=/tmp/site/.$(basename "$archive")
  if [ -f "$archive" ] && [ ! -f "$stamp" ]; then tar -C /tmp/site -xJf "$archive" && touch "$stamp"; fi
done
if [ -f .gpu/aot.tar ] && [ ! -f /tmp/site/.aot ]; then
  mkdir -p /tmp/site/flashinfer/data/aot && tar -C /tmp/site/flashinfer/data/aot -xf .gpu/aot.tar \
    && touch /tmp/site/.aot
fi
# The checkout is not installed there: it goes on PYTHONPATH, and `voxgate` runs its CLI.
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
voxgate() { python3 -c 'import sys; from gateway.cli import main; sys.argv[0] = "voxgate"; sys.exit(main())' "$@"; }

save_kernels() {
  local dir
  dir=$(mktemp -d)
  for so in ~/.cache/flashinfer/*/*/cached_ops/*/*.so; do
    [ -f "$so" ] || continue
    name=$(basename "$(dirname "$so")")
    mkdir -p "$dir/$name" && cp "$so" "$dir/$name/$name.so"
  done
  tar -C "$dir" -cf "${OUT:-/tmp}/aot.tar" . && rm -rf "$dir"
}
