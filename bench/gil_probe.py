"""How much a busy Python thread slows the engine loop that shares its interpreter (CPU).

    python bench/gil_probe.py --steps 10 --switch-interval 0.005

The engine thread gives up the GIL inside torch calls and must win it back before its next
Python statement; any other runnable Python thread (the gateway's event loop, the codec
thread) can hold it for up to `sys.getswitchinterval()` each time. This measures engine step
time alone and beside one busy thread, for the interval given.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import torch

from engine.config import EngineConfig
from engine.factory import build_core
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.registry import load_model


def step_ms(core, steps: int) -> float:
    reqs = [
        core.add_request(
            SpeechRequest(
                f"Request {i}.", sampling=SamplingParams(max_tokens=400, min_tokens=400, seed=i)
            )
        )
        for i in range(8)
    ]
    for _ in range(5):
        core.step()
    start = time.perf_counter()
    for _ in range(steps):
        core.step()
    elapsed = time.perf_counter() - start
    for r in reqs:
        core.cancel(r.request_id)
    return 1e3 * elapsed / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--switch-interval", type=float, default=sys.getswitchinterval())
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_interval)
    torch.set_num_threads(1)
    core = build_core(
        load_model("tiny-orpheus"), EngineConfig(num_kv_blocks=2048), torch.device("cpu")
    )
    alone = step_ms(core, args.steps)
    stop = threading.Event()

    def busy() -> None:  # pure Python, like an event loop encoding and sending frames
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        contended = step_ms(core, args.steps)
    finally:
        stop.set()
        thread.join()
    print(
        f"switch interval {args.switch_interval * 1e3:.2f} ms: {alone:.1f} ms/step alone, "
        f"{contended:.1f} ms/step beside one busy Python thread"
    )


if __name__ == "__main__":
    main()
