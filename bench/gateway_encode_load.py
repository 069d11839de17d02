"""The gateway's event loop under audio encoding load: N streams each receive a 1 s chunk of
model audio a second (as CosyVoice 2's steady chunks arrive) and encode it to 20 ms Opus frames,
on the loop (as before) or off it (`OffLoopEncoder`, what the gateway does), while a probe
measures how late the loop wakes a 5 ms timer — the delay every other session's pacing,
handshake and first frame would see.

    PYTHONPATH=$PWD python bench/gateway_encode_load.py --streams 10,30,45 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from gateway.audio import make_encoder, make_off_loop_encoder
from gateway.protocol import AudioSpec

RATE = 24000


async def run(streams: int, seconds: float, off_loop: bool) -> dict:
    spec = AudioSpec()
    pcm = (0.1 * np.random.default_rng(0).standard_normal(RATE)).astype(np.float32)
    frames = 0
    lags: list[float] = []
    done = asyncio.Event()

    async def stream(i: int) -> None:
        nonlocal frames
        encoder = make_off_loop_encoder(spec, RATE) if off_loop else make_encoder(spec, RATE)
        start = time.perf_counter() + i / streams  # chunks spread over the second
        for k in range(int(seconds)):
            await asyncio.sleep(max(0.0, start + k - time.perf_counter()))
            out = await encoder.encode(pcm) if off_loop else encoder.encode(pcm)
            frames += len(out)

    async def probe() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(1e3 * (time.perf_counter() - t0 - 0.005))

    cpu0, wall0 = time.process_time(), time.perf_counter()
    probing = asyncio.create_task(probe())
    await asyncio.gather(*(stream(i) for i in range(streams)))
    done.set()
    await probing
    lags.sort()
    return {
        "streams": streams,
        "off_loop": off_loop,
        "frames": frames,
        "cpu_s": round(time.process_time() - cpu0, 2),
        "wall_s": round(time.perf_counter() - wall0, 2),
        "loop_lag_ms": {
            "p50": round(lags[len(lags) // 2], 2),
            "p99": round(lags[int(0.99 * len(lags))], 2),
            "max": round(lags[-1], 2),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="10,30,45")
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args()
    for n in (int(s) for s in args.streams.split(",")):
        for off_loop in (False, True):
            print(asyncio.run(run(n, args.seconds, off_loop)), flush=True)


if __name__ == "__main__":
    main()
