# Sourced at the start of a command on the lent GPU machine: `. bench/gpu_setup.sh`.
# Unpacks the carried packages (.gpu/site.txz or .gpu/site-ray.txz, built here by
# bench/gpu_carry.sh) and FlashInfer's kernels compiled by earlier calls (.gpu/aot.txz, xz: the
# .so files shrink ~4x, which the 64-MiB carry limit needs) into /tmp/site, once per machine,
# and puts them on PYTHONPATH. `save_kernels` (at the end of a command) packs the carried
# kernels and those this call compiled into $OUT/aot.txz, to carry next time as .gpu/aot.txz,
# and Inductor's cache into $OUT/inductor.txz (.gpu/inductor.txz). It also puts the checkout
# on PYTHONPATH and puts a `voxgate` command on PATH (the package is not installed on the
# machine).
mkdir -p /tmp/site
for archive in .gpu/site.txz .gpu/site-ray.txz .gpu/ray.txz; do
  stamp=/tmp/site/.$(basename "$archive")
  if [ -f "$archive" ] && [ ! -f "$stamp" ]; then tar -C /tmp/site -xJf "$archive" && touch "$stamp"; fi
done
if [ -f .gpu/aot.txz ] && [ ! -f /tmp/site/.aot ]; then
  mkdir -p /tmp/site/flashinfer/data/aot && tar -C /tmp/site/flashinfer/data/aot -xJf .gpu/aot.txz \
    && touch /tmp/site/.aot
fi
# Zonos' text front end (bench/gpu_carry_espeak.sh): eSpeak NG and phonemizer, unpacked into
# /tmp/zonos, found through these variables (the library's data path is its build's, /usr/lib,
# unless ESPEAK_DATA_PATH says otherwise; phonemizer looks for the library in the system's
# cache unless told).
if [ -f .gpu/zonos.txz ]; then
  [ -f /tmp/zonos/.unpacked ] || { mkdir -p /tmp/zonos && tar -C /tmp/zonos -xJf .gpu/zonos.txz \
    && touch /tmp/zonos/.unpacked; }
  ESPEAK_LIB=/tmp/zonos/espeak/usr/lib/x86_64-linux-gnu
  export PATH=/tmp/zonos/espeak/usr/bin:$PATH LD_LIBRARY_PATH=$ESPEAK_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export ESPEAK_DATA_PATH=$ESPEAK_LIB PHONEMIZER_ESPEAK_LIBRARY=$ESPEAK_LIB/libespeak-ng.so.1
  ZONOS_SITE=/tmp/zonos/site
fi
# Inductor's compiled programs (SNAC's blocks, --compile-codec; float16 ones for --snac-fp16)
# and their Triton kernels: a fresh machine's first server start compiles them (20-120 s),
# unless an earlier call's cache was carried as .gpu/inductor.txz.
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
# Triton's own kernels (SNAC's hand-written ones, and the tiles their tuning compiles) in the same folder,
# so that save_kernels packs them with Inductor's.
export TRITON_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR/triton-jit
if [ -f .gpu/inductor.txz ] && [ ! -f $TORCHINDUCTOR_CACHE_DIR/.carried ]; then
  mkdir -p $TORCHINDUCTOR_CACHE_DIR && tar -C $TORCHINDUCTOR_CACHE_DIR -xJf .gpu/inductor.txz \
    && touch $TORCHINDUCTOR_CACHE_DIR/.carried
fi
# The checkout is not installed there: it goes on PYTHONPATH, and `voxgate` runs its CLI.
export PYTHONPATH=$PWD:/tmp/site${ZONOS_SITE:+:$ZONOS_SITE}${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
# A command, not a shell function, so that `timeout 500 voxgate bench …` runs it too.
mkdir -p /tmp/site/bin
cat > /tmp/site/bin/voxgate <<'SH'
#!/bin/sh
exec python3 -c 'import sys; from gateway.cli import main; sys.argv[0] = "voxgate"; sys.exit(main())' "$@"
SH
chmod +x /tmp/site/bin/voxgate

save_kernels() {
  local dir so name
  dir=$(mktemp -d)
  [ -d /tmp/site/flashinfer/data/aot ] && cp -r /tmp/site/flashinfer/data/aot/. "$dir"/
  for so in ~/.cache/flashinfer/*/*/cached_ops/*/*.so; do
    [ -f "$so" ] || continue
    name=$(basename "$(dirname "$so")")
    mkdir -p "$dir/$name" && cp "$so" "$dir/$name/$name.so"
  done
  tar -C "$dir" -cJf "${OUT:-/tmp}/aot.txz" . && rm -rf "$dir"
  # Inductor's cache too, to carry as .gpu/inductor.txz where the carry's 64 MiB allow it.
  [ -d "$TORCHINDUCTOR_CACHE_DIR" ] && tar -C "$TORCHINDUCTOR_CACHE_DIR" -I "xz -T0" -cf "${OUT:-/tmp}/inductor.txz" \
    --exclude=.carried --exclude='*.lock' . && ls -l "${OUT:-/tmp}/inductor.txz"
}
