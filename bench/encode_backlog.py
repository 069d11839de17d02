"""The output encoders' queue under a served load, with and without hurried encodes: S streams
each receive a 1.28-s chunk of speech every 1.28 s (Orpheus's steady chunks), at random phases,
encoded as sessions encode them (`encode_parts`: head, then the rest) through W encoder
processes, for each `--opus-hurry-ms` asked (0: complexity 10 always). Prints each run's time
waiting for a worker (p50 / p99 / max, the share over 20 and 100 ms) and the workers' busy
share, and the share of encodes that ran hurried. The speech is Flite's, as in bench/opus_complexity.py.

    PYTHONPATH=$PWD python bench/encode_backlog.py --workers 1 --streams 80,110 --hurry-ms 0,20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import numpy as np
from opus_complexity import RATE, speech

from gateway.codec_workers import CodecWorkers
from gateway.protocol import AudioSpec

CHUNK_S = 1.28


async def serve(workers: CodecWorkers, streams: int, seconds: float, hurry_ms: float) -> str:
    audio = np.tile(speech()[0], 3)
    size = int(CHUNK_S * RATE)
    waits: list[float] = []
    runs: list[float] = []
    hurried: list[bool] = []

    def observe(queued_s: float, run_s: float, ran_hurried: bool) -> None:
        waits.append(queued_s)
        runs.append(run_s)
        hurried.append(ran_hurried)

    async def stream(i: int) -> None:
        encoder = workers.open(AudioSpec(), RATE, 32000, observe, hurry_ms / 1000 or None)
        await asyncio.sleep(random.random() * CHUNK_S)
        start, k = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            offset = (977 * (i + k) * RATE // 100) % (len(audio) - size)
            async for _ in encoder.encode_parts(audio[offset : offset + size]):
                pass
            k += 1
            await asyncio.sleep(max(0.0, start + k * CHUNK_S - time.perf_counter()))
        encoder.close()

    await asyncio.gather(*(stream(i) for i in range(streams)))
    w = 1000 * np.array(waits)
    return (
        f"waits p50 {np.percentile(w, 50):.1f} / p99 {np.percentile(w, 99):.1f} / max "
        f"{w.max():.0f} ms, {np.mean(w > 20):.1%} over 20 ms, {np.mean(w > 100):.1%} over "
        f"100 ms; {np.mean(hurried):.0%} hurried; workers busy "
        f"{sum(runs) / seconds / workers.processes:.0%} ({len(w)} encodes)"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1, help="encoder processes")
    ap.add_argument("--streams", default="80,110", help="comma-separated stream counts")
    ap.add_argument("--hurry-ms", default="0,20", help="--opus-hurry-ms values (0: never)")
    ap.add_argument("--seconds", type=float, default=15.0, help="each run's length")
    args = ap.parse_args()
    random.seed(0)
    workers = CodecWorkers(args.workers).start()
    try:
        for streams in (int(s) for s in args.streams.split(",")):
            for hurry_ms in (float(h) for h in args.hurry_ms.split(",")):
                result = await serve(workers, streams, args.seconds, hurry_ms)
                print(f"{streams} streams, --opus-hurry-ms {hurry_ms:g}: {result}", flush=True)
    finally:
        workers.close()


if __name__ == "__main__":
    asyncio.run(main())
