"""What Opus's complexity costs and buys on this machine: for each complexity, one core's time
per 20-ms frame of 24 kHz mono at the gateway's bitrate, and how far the decoded audio is from
what went in (SNR, and the mean log-spectral distance over the speech's bins). The gateway
encodes at 10 and drops to 6 while its encoders are behind (`--opus-hurry-ms`,
gateway/audio.py HURRIED_COMPLEXITY); this is the trade it makes.

    PYTHONPATH=$PWD python bench/opus_complexity.py [--wav speech.wav]

Without --wav it speaks a few sentences with Flite (the Debian `flite` package), or, where
Flite is missing, uses a harmonic test signal with a syllable-rate envelope.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import tempfile
import time
import wave

import numpy as np

from gateway.audio_in import AudioDecoder
from gateway.opus_lib import MAX_PACKET, load_opus
from gateway.protocol import AudioFormat, AudioSpec

RATE = 24000
FRAME = RATE // 50  # 20 ms
SENTENCES = (
    "The quick brown fox jumps over the lazy dog. A gateway serves speech to hundreds of "
    "listeners at once, and every frame must arrive on time."
)


def read_wav(path: str) -> np.ndarray:
    """A 16-bit mono WAV as float32 at RATE (linear interpolation: speech below 12 kHz)."""
    with wave.open(path) as w:
        rate, data = w.getframerate(), w.readframes(w.getnframes())
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise SystemExit(f"{path}: need 16-bit mono PCM")
    x = np.frombuffer(data, np.int16).astype(np.float32) / 32768
    t = np.arange(int(len(x) * RATE / rate)) / RATE
    return np.interp(t, np.arange(len(x)) / rate, x).astype(np.float32)


def speech() -> tuple[np.ndarray, str]:
    if shutil.which("flite"):
        with tempfile.NamedTemporaryFile(suffix=".wav") as f:
            subprocess.run(["flite", "-t", SENTENCES, "-o", f.name], check=True)
            return read_wav(f.name), "flite"
    t = np.arange(RATE * 8) / RATE
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None)
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 20))
    return (0.2 * envelope * voiced).astype(np.float32), "harmonic test signal"


def log_spectrum(x: np.ndarray, n: int = 512, hop: int = 128) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[::hop] * np.hanning(n)
    return 20 * np.log10(np.abs(np.fft.rfft(frames)) + 1e-4)


def decode(packets: list[bytes]) -> np.ndarray:
    """The packets as the gateway decodes a client's Opus (libopus through PyAV), at RATE."""
    decoder = AudioDecoder(AudioSpec(AudioFormat.OPUS, RATE), RATE)
    return np.concatenate([decoder.decode(p) for p in packets])


def measure(pcm: np.ndarray, complexity: int, bitrate: int) -> dict:
    opus = load_opus()
    if opus is None:
        raise SystemExit("libopus cannot be loaded here (see gateway/opus_lib.py)")
    frames = pcm[: len(pcm) // FRAME * FRAME].reshape(-1, FRAME)
    encoder = opus.create(RATE, bitrate)
    opus.set_complexity(encoder, complexity)
    out = ctypes.create_string_buffer(MAX_PACKET)
    start = time.perf_counter()
    packets = [opus.encode(encoder, f, out) for f in frames]
    seconds = time.perf_counter() - start
    opus.destroy(encoder)
    decoded = decode(packets)
    reference = frames.reshape(-1)
    lag = min(range(0, 600), key=lambda k: np.mean((decoded[k : k + RATE] - reference[:RATE]) ** 2))
    n = min(len(decoded) - lag, len(reference))
    a, b = decoded[lag : lag + n], reference[:n]
    snr = 10 * np.log10(np.sum(b**2) / np.sum((a - b) ** 2))
    ref_spec, got_spec = log_spectrum(b), log_spectrum(a)
    speech_bins = ref_spec > -50  # leave out the silent bins, whose dB say nothing
    distance = float(np.mean(np.abs(got_spec - ref_spec)[speech_bins]))
    return {
        "complexity": complexity,
        "ms_per_frame": 1000 * seconds / len(frames),
        "x_real_time": len(frames) * 0.02 / seconds,
        "kbit_s": sum(map(len, packets)) * 8 / (len(frames) * 0.02) / 1000,
        "snr_db": float(snr),
        "log_spectral_distance_db": distance,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav", help="16-bit mono speech to encode (default: Flite's)")
    ap.add_argument("--bitrate", type=int, default=32000, help="bit/s (the gateway's default)")
    ap.add_argument("--complexities", default="10,8,7,6,4,2,0")
    ap.add_argument("--repeat", type=int, default=3, help="the audio this many times over")
    args = ap.parse_args()
    pcm, source = (read_wav(args.wav), args.wav) if args.wav else speech()
    pcm = np.tile(pcm, args.repeat)
    print(f"{len(pcm) / RATE:.1f} s of {source}, {args.bitrate} bit/s")
    for c in (int(x) for x in args.complexities.split(",")):
        r = measure(pcm, c, args.bitrate)
        print(
            f"complexity {c:2d}: {r['ms_per_frame']:.3f} ms a frame ({r['x_real_time']:.0f}x "
            f"real time on one core), {r['kbit_s']:.1f} kbit/s, SNR {r['snr_db']:.1f} dB, "
            f"log-spectral distance {r['log_spectral_distance_db']:.2f} dB"
        )


if __name__ == "__main__":
    main()
