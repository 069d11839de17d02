#!/usr/bin/env bash
# Builds .gpu/zonos.txz (git-ignored; `bench/gpu_carry.sh zonos` runs this): Zonos reads its
# text through eSpeak NG and the `phonemizer` package (models/zonos/phonemes.py), and the lent
# GPU machine has neither and reaches no registry. The archive holds
#   site/    phonemizer and dlinfo, unzipped from their wheels (the machine has phonemizer's
#            other needs: attrs, joblib, typing-extensions);
#   espeak/  espeak-ng, libespeak-ng1, libsonic0 and espeak-ng-data, unpacked from this
#            machine's .deb files (dpkg -x: nothing installed, nothing of / touched), and a stub
#            libpcaudio.so.0 in place of the audio-output library, whose real one would bring
#            PulseAudio and ALSA along: phonemizer's library calls and `espeak-ng -q --ipa` only
#            make phonemes, never sound, so no stub function is ever called.
# On the machine `. bench/gpu_setup.sh` unpacks it into /tmp/zonos and sets PATH,
# LD_LIBRARY_PATH, ESPEAK_DATA_PATH and PHONEMIZER_ESPEAK_LIBRARY (BENCHMARKS.md, "Next GPU
# session").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.gpu/zonos.txz
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/wheels" phonemizer==3.4.0 dlinfo==2.0.0
mkdir -p "$WORK/zonos/site" "$WORK/debs"
for wheel in "$WORK"/wheels/*.whl; do unzip -q -o "$wheel" -d "$WORK/zonos/site"; done

(cd "$WORK/debs" && apt-get download espeak-ng libespeak-ng1 libsonic0 espeak-ng-data)
for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/zonos/espeak"; done

# The audio-output stub: every function libespeak-ng imports from pcaudio, failing, under the
# real library's soname so the loader takes it.
LIB=$(dirname "$(find "$WORK/zonos/espeak" -name 'libespeak-ng.so.1*' | head -1)")
nm -D --undefined-only "$LIB"/libespeak-ng.so.1 | awk '{print $2}' \
  | grep -E '^(audio_object_|create_audio_device_object)' \
  | sed 's/.*/void *&(void) { return 0; }/' > "$WORK/pcaudio.c"
cc -shared -fPIC -Wl,-soname,libpcaudio.so.0 -o "$LIB/libpcaudio.so.0" "$WORK/pcaudio.c"

mkdir -p .gpu
tar -C "$WORK/zonos" -cf - . | xz -6 -T0 > "$OUT"
ls -l "$OUT"
