"""What carrying engine traffic through Ray costs, against the engine's own process.

    python bench/ray_transport_probe.py --rounds 300 --chunk-ms 80

A round trip: a command goes to the engine's host (a `ReportPlayback`, as the gateway sends
every frame) and an audio chunk's array of `--chunk-ms` (float32 at 24 kHz) comes back as the
command's answer, through

- `process`: the two multiprocessing queues of engine/process_engine.py (the default path);
- `ray`: engine/ray_replica.py's own `send`, router thread and `poll` on a local Ray actor,
  as engine/ray_engine.py drives them (numbered actor calls out, a long poll back).

The host echoes at once (no engine), so the figures are the transport's alone. A chunk's
one-way delay is about half a round trip; the `poll` leg alone (the audio's way) is reported too.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np

from engine.api import ReportPlayback
from engine.engine_host import Answered, CommandBatch
from engine.loop import Applied
from engine.ray_replica import ReplicaHost

RATE = 24_000


def _echo(samples: int, commands, events) -> None:
    """Answers every command with one audio chunk, as the engine loop's answer to it."""
    pcm = np.zeros(samples, np.float32)
    while (message := commands.get()) is not None:
        for _, token in message.commands:
            events.put(Answered(token, Applied(pcm)))


class EchoHost(ReplicaHost):
    """The replica actor's own send, router and poll, around an echo in place of the engine."""

    def __init__(self, samples: int) -> None:
        self._setup(_echo, samples)


def _summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return (
        f"{name:>16}: median {statistics.median(ms):.3f} ms  p90 "
        f"{ms[int(0.9 * len(ms))]:.3f} ms  p99 {p99:.3f} ms"
    )


def probe_process(rounds: int, samples: int) -> list[float]:
    ctx = mp.get_context("spawn")
    commands, events = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_echo, args=(samples, commands, events), daemon=True)
    child.start()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        commands.put(CommandBatch(((ReportPlayback("r", t0), 0),)))
        events.get()
        out.append(time.perf_counter() - t0)
    commands.put(None)
    child.join(5)
    return out


def probe_ray(rounds: int, samples: int) -> tuple[list[float], list[float]]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    host = ray.remote(max_concurrency=4)(EchoHost).remote(samples)
    round_trips, polls = [], []
    for seq in range(rounds):
        t0 = time.perf_counter()
        host.send.remote("probe", seq, CommandBatch(((ReportPlayback("r", t0), seq),)))
        t1 = time.perf_counter()
        got = ray.get(host.poll.remote("probe", 1.0))
        t2 = time.perf_counter()
        assert len(got) == 1
        round_trips.append(t2 - t0)
        polls.append(t2 - t1)
    # The poll leg alone, with the chunk already waiting (the reader's steady state).
    ready = []
    for seq in range(rounds, 2 * rounds):
        host.send.remote("probe", seq, CommandBatch(((ReportPlayback("r", 0.0), seq),)))
        time.sleep(0.002)
        t0 = time.perf_counter()
        ray.get(host.poll.remote("probe", 1.0))
        ready.append(time.perf_counter() - t0)
    ray.shutdown()
    return round_trips, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--chunk-ms", type=float, default=80.0)
    args = parser.parse_args()
    samples = int(RATE * args.chunk_ms / 1000)
    print(f"{args.rounds} round trips, {args.chunk_ms:g} ms chunks ({samples * 4} bytes)")
    print(_summary("process", probe_process(args.rounds, samples)))
    round_trips, ready = probe_ray(args.rounds, samples)
    print(_summary("ray", round_trips))
    print(_summary("ray poll (ready)", ready))


if __name__ == "__main__":
    main()
