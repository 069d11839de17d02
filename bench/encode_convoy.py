"""How long one 640-ms chunk takes to encode to 20-ms Opus frames on a worker thread, alone
and beside threads that keep the GIL busy (as the gateway's event loop and engine-event reader
do under load): PyAV's encoder (resampler, libavcodec) against libopus called directly
(`gateway.opus_lib`). Each time a worker comes back from C it waits for the GIL, so the cost
of a busy process grows with how often an encoder goes back and forth.

    PYTHONPATH=$PWD python bench/encode_convoy.py --busy 0,1 --chunks 60
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

from gateway.audio import AudioEncoder, OpusEncoder, make_encoder
from gateway.protocol import AudioSpec

RATE = 24000
CHUNK_S = 0.64


def spin(stop: threading.Event) -> None:
    """Pure Python work: holds the GIL until the interpreter makes it let go."""
    x = 0
    while not stop.is_set():
        for _ in range(1000):
            x += 1


def encode_ms(encoder: AudioEncoder, chunks: int, busy: int) -> list[float]:
    pcm = (0.1 * np.random.default_rng(0).standard_normal(int(RATE * CHUNK_S))).astype(np.float32)
    stop = threading.Event()
    spinners = [threading.Thread(target=spin, args=(stop,)) for _ in range(busy)]
    for t in spinners:
        t.start()
    took: list[float] = []

    def work() -> None:
        for _ in range(chunks):
            t0 = time.perf_counter()
            encoder.encode(pcm)
            took.append(1000 * (time.perf_counter() - t0))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    stop.set()
    for t in spinners:
        t.join()
    return sorted(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", default="0,1", help="busy Python threads beside the encoder")
    ap.add_argument("--chunks", type=int, default=60)
    ap.add_argument("--switch-ms", type=float, default=0.5, help="the gateway's --gil-switch-ms")
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_ms / 1000)
    for busy in (int(b) for b in args.busy.split(",")):
        for name, encoder in (
            ("pyav", OpusEncoder(AudioSpec(), RATE)),
            ("direct", make_encoder(AudioSpec(), RATE)),
        ):
            took = encode_ms(encoder, args.chunks, busy)
            print(
                f"busy threads {busy} {name:6s} 640-ms chunk: p50 {took[len(took) // 2]:.1f} ms, "
                f"p90 {took[int(0.9 * len(took))]:.1f} ms"
            )


if __name__ == "__main__":
    main()
