"""How long the event loop waits for one 640-ms chunk's 20-ms Opus frames, alone and beside
threads that keep the GIL busy (as the gateway's event loop and engine-event reader do under
load), for each way the gateway can encode: worker threads with PyAV's encoder (resampler,
libavcodec), worker threads with libopus called directly (`gateway.opus_lib`, the default for
24 kHz), and a worker process (`--encode-processes`). On a thread, each return from C waits
for the GIL, so a busy process slows the encode with every return it makes; a process has a
GIL of its own.

    PYTHONPATH=$PWD python bench/encode_convoy.py --busy 0,1 --chunks 60
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

import numpy as np

from gateway.audio import OffLoopEncoder, OpusEncoder, make_off_loop_encoder
from gateway.codec_workers import CodecWorkers
from gateway.protocol import AudioSpec

RATE = 24000
CHUNK_S = 0.64


def spin(stop: threading.Event) -> None:
    """Pure Python work: holds the GIL until the interpreter makes it let go."""
    x = 0
    while not stop.is_set():
        for _ in range(1000):
            x += 1


async def encode_ms(encoder, chunks: int, busy: int) -> list[float]:
    pcm = (0.1 * np.random.default_rng(0).standard_normal(int(RATE * CHUNK_S))).astype(np.float32)
    stop = threading.Event()
    spinners = [threading.Thread(target=spin, args=(stop,)) for _ in range(busy)]
    for t in spinners:
        t.start()
    took: list[float] = []
    try:
        for _ in range(chunks):
            t0 = time.perf_counter()
            await encoder.encode(pcm)
            took.append(1000 * (time.perf_counter() - t0))
    finally:
        stop.set()
        for t in spinners:
            t.join()
    return sorted(took)


async def run(args: argparse.Namespace, workers: CodecWorkers) -> None:
    for busy in (int(b) for b in args.busy.split(",")):
        for name, encoder in (
            ("threads, PyAV", OffLoopEncoder(OpusEncoder(AudioSpec(), RATE))),
            ("threads, libopus", make_off_loop_encoder(AudioSpec(), RATE)),
            ("process", workers.open(AudioSpec(), RATE)),
        ):
            await encoder.encode(np.zeros(RATE // 10, np.float32))  # warm
            took = await encode_ms(encoder, args.chunks, busy)
            print(
                f"busy threads {busy}, {name:16s}: 640-ms chunk p50 {took[len(took) // 2]:.1f} "
                f"ms, p90 {took[int(0.9 * len(took))]:.1f} ms"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", default="0,1", help="busy Python threads beside the encoder")
    ap.add_argument("--chunks", type=int, default=60)
    ap.add_argument("--switch-ms", type=float, default=0.5, help="the gateway's --gil-switch-ms")
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_ms / 1000)
    workers = CodecWorkers(1).start()
    try:
        asyncio.run(run(args, workers))
    finally:
        workers.close()


if __name__ == "__main__":
    main()
