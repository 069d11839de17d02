"""The gateway's side of full-duplex serving, without a model: how much of one CPU core the
gateway process spends per Moshi-shaped session, and how late its event loop runs.

Why: on the H200 the Moshi engine alone carries 128 sessions (49-ms steps of the 80-ms frame),
but served through `/v1/stream` the gateway's one event loop fell behind (BENCHMARKS.md, the
Moshi table). This puts the real gateway (`gateway.app`, uvicorn, Opus decoding of every
microphone packet, the encoder processes, the sends) in front of `FrameClockEngine`, an engine
client with Moshi's facts and its message pattern but no model: every 80 ms one frame step's
events (an 80-ms audio chunk and a text piece per session) cross to the gateway as one
message, as the engine process sends them, and every command the gateway sends is pickled as
the engine process's queue would. The clients are `voxgate bench --capacity` in another
process, streaming Opus microphones in real time. Printed per point: the gateway process's
CPU seconds per session-second (all its threads; the encoder processes not included), its
event loop's lag (`voxgate_event_loop_lag_seconds`) and the bench's on-time frames.

    PYTHONPATH=$PWD python bench/duplex_gateway_load.py --sessions 16,32 --seconds 20
    ... --sessions 32 --profile 30   # where the event loop's time goes

On a 2-core machine the clients share the cores with the gateway: read the CPU per
session-second, not the on-time frames, as the gateway's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pickle
import pstats
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from engine.api import Cancel, EndSession, PushAudio, Submit
from engine.engine_host import CommandBatch, HostedClient, StepEvents
from engine.loop import Applied
from engine.outputs import (
    AudioChunk,
    EngineStats,
    Finished,
    FinishReason,
    StepTiming,
    TextDelta,
)

FRAME_S = 0.08  # Moshi's frame
RATE = 24000


def moshi_facts():
    """tiny-moshi's facts (Moshi's rates and kinds; its size does not matter here)."""
    from models.registry import load_model

    return load_model("tiny-moshi", device="cpu").facts


class FrameClockEngine(HostedClient):
    """An engine client that answers every session with an 80-ms chunk of noise and a text
    piece each frame, on a clock of its own thread, as the engine process's events arrive.
    Its commands are gathered as the engine process's client gathers them (one CommandBatch a
    turn of the event loop) and pickled as its queue would pickle them."""

    def __init__(self, facts) -> None:
        super().__init__()
        self.facts = facts
        self._sessions: set[str] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._audio = (0.05 * np.random.default_rng(0).standard_normal(int(RATE * FRAME_S))).astype(
            np.float32
        )
        self.commands = 0
        self.batches = 0
        self._thread = threading.Thread(target=self._tick, name="frame-clock", daemon=True)
        self._thread.start()

    @property
    def ready(self) -> bool:
        return not self._stop.is_set()

    def stats(self) -> EngineStats:
        with self._guard:
            running = len(self._sessions)
        return EngineStats(running, 0, 1 << 20, 0, 0, StepTiming(), True)

    async def shutdown(self) -> None:
        self._stop.set()
        self._fail_all("the engine was shut down")

    def _send_batch(self, batch: CommandBatch) -> None:
        pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)  # the queue's pickling
        self.batches += 1
        for command, token in batch.commands:
            self._apply(command, token)

    def _apply(self, command, token) -> None:
        self.commands += 1
        match command:
            case Submit(request):
                rid = request.request_id or uuid.uuid4().hex
                with self._guard:
                    self._sessions.add(rid)
                self._answer(token, Applied(rid))
            case EndSession(rid) | Cancel(rid):
                with self._guard:
                    known = rid in self._sessions
                    self._sessions.discard(rid)
                reason = (
                    FinishReason.STOP
                    if isinstance(command, EndSession)
                    else (FinishReason.CANCELLED)
                )
                if known:
                    self._deliver(Finished(rid, reason, 0))
            case PushAudio():
                pass
            case _:
                if token is not None:
                    self._answer(token, Applied(None))

    def _tick(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            due += FRAME_S
            time.sleep(max(0.0, due - time.monotonic()))
            with self._guard:
                live = list(self._sessions)
            if not live:
                continue
            events = []
            for rid in live:
                events += [AudioChunk(rid, self._audio, RATE), TextDelta(rid, " a")]
            # The engine process pickles the step's events; this process's reader unpickles.
            message = pickle.loads(pickle.dumps(StepEvents(tuple(events)), pickle.HIGHEST_PROTOCOL))
            self._deliver_all(message.events)


def profiled(run, profile: cProfile.Profile | None):
    """`run` with `profile` enabled on its own thread (cProfile sees one thread)."""

    def wrapped(**kwargs):
        if profile is None:
            return run(**kwargs)
        profile.enable()
        try:
            return run(**kwargs)
        finally:
            profile.disable()

    return wrapped


def start_gateway(
    engine, encode_processes: int, decode_processes: int, profile: cProfile.Profile | None = None
):
    """The real gateway over `engine`, in a thread of this process (its event loop profiled
    when `profile` is given)."""
    from gateway.config import GatewaySettings
    from gateway.in_thread import serve_in_thread

    settings = GatewaySettings(
        model="tiny-moshi", encode_processes=encode_processes, decode_processes=decode_processes
    )
    return serve_in_thread(
        settings, engine, wrap=lambda run: profiled(run, profile), start_timeout_s=60.0
    )


def loop_lag(port: int) -> tuple[float, float]:
    """(seconds of lag in all, samples) from the gateway's /metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("voxgate_event_loop_lag_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("voxgate_event_loop_lag_seconds_count"):
            count = float(line.split()[-1])
    return total, count


def run_point(
    port: int, loop_thread: threading.Thread, sessions: int, seconds: float, out: Path
) -> dict:
    loop_clock = time.pthread_getcpuclockid(loop_thread.ident)
    before_loop = time.clock_gettime(loop_clock)
    before_cpu, before_wall = time.process_time(), time.monotonic()
    before_lag = loop_lag(port)
    command = [
        sys.executable, "-m", "gateway.cli", "bench", "--url", f"ws://127.0.0.1:{port}/v1/stream",
        "--capacity", str(sessions), "--stream-seconds", str(seconds), "--stagger", "2",
        "--initial-buffer-ms", "80", "--drain-timeout", str(seconds + 30), "--no-early-stop",
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    cpu, wall = time.process_time() - before_cpu, time.monotonic() - before_wall
    loop_cpu = time.clock_gettime(loop_clock) - before_loop
    lag_s, samples = (a - b for a, b in zip(loop_lag(port), before_lag, strict=True))
    line = next(
        (x for x in done.stdout.splitlines() + done.stderr.splitlines() if "listeners:" in x), ""
    )
    return {
        "sessions": sessions,
        "gateway_cpu_per_session_s": round(cpu / (sessions * seconds), 4),
        "gateway_cores": round(cpu / wall, 2),
        "loop_cpu_per_session_s": round(loop_cpu / (sessions * seconds), 4),
        "loop_cores": round(loop_cpu / wall, 2),
        "loop_lag_s": round(lag_s, 2),
        "loop_lag_samples": int(samples),
        "bench": line.split("INFO voxgate.bench ")[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="16,32", help="comma-separated session counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="each session's length")
    parser.add_argument("--encode-processes", type=int, default=4, help="as beside a GPU engine")
    parser.add_argument(
        "--decode-processes",
        type=int,
        default=2,
        help="microphone decoder processes, as beside a GPU engine (0: on the event loop)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="profile the event loop's thread (cProfile) and print its N costliest functions",
    )
    args = parser.parse_args()
    engine = FrameClockEngine(moshi_facts())
    profile = cProfile.Profile() if args.profile else None
    gateway = start_gateway(engine, args.encode_processes, args.decode_processes, profile)
    with tempfile.TemporaryDirectory() as out:
        for n in (int(x) for x in args.sessions.split(",")):
            print(
                json.dumps(run_point(gateway.port, gateway.thread, n, args.seconds, Path(out))),
                flush=True,
            )
    gateway.stop(timeout_s=30.0)  # the app's shutdown stops the encoder processes
    asyncio.run(engine.shutdown())
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
