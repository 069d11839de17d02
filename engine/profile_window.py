"""A torch profile of the serving loop under real load: where a loop turn's time goes once the
engine carries many streams, which the isolated step benchmarks
(bench/step_time.py) cannot show — the codec thread's kernels beside the LLM's, the host's
work between steps, the process hop.

`voxgate serve --profile-dir DIR --profile-at-streams N` arms it: the first time N requests
are running (and `--profile-after-s S` seconds later, when given), the next `TURNS` loop turns
are profiled (host ops on every thread, and every CUDA kernel), then DIR gets `ops.txt` (time
by op, device and host) and `trace.json.gz` (a Chrome / Perfetto trace). Once per server: the
profiler's own overhead must not linger. The delay reaches the moments a capacity point
misses in, its last seconds, when every stream runs at its longest context: N streams run from
the end of the ramp on, ~15 s before then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger("voxgate.engine")

TURNS = 100  # loop turns in the window: ~1-2 s of a loaded GPU engine


class ProfileWindow:
    def __init__(
        self,
        out_dir: str,
        at_streams: int,
        device: torch.device,
        after_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.at_streams = at_streams
        self.after_s = after_s
        self.device = device
        self.clock = clock
        self._armed_at: float | None = None  # when at_streams first ran
        self._profiler: torch.profiler.profile | None = None
        self._turns = 0
        self.done = False

    def turn(self, running: int) -> None:
        """Called at the start of every loop turn with the number of running requests."""
        if self.done:
            return
        if self._profiler is None:
            if self._armed_at is None:
                if running < self.at_streams:
                    return
                self._armed_at = self.clock()
            if self.clock() - self._armed_at < self.after_s:
                return
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities, record_shapes=False)
            self._profiler.start()
            log.info("profiling %d loop turns at %d running requests", TURNS, running)
            return
        self._turns += 1
        if self._turns >= TURNS:
            self._finish()

    def _finish(self) -> None:
        profiler, self._profiler, self.done = self._profiler, None, True
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        profiler.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        averages = profiler.key_averages()
        tables = [
            averages.table(sort_by=key, row_limit=40)
            for key in ("self_device_time_total", "self_cpu_time_total")
            if self.device.type == "cuda" or key == "self_cpu_time_total"
        ]
        (self.out_dir / "ops.txt").write_text("\n\n".join(tables))
        trace = self.out_dir / "trace.json"
        profiler.export_chrome_trace(str(trace))
        import gzip
        import shutil

        with open(trace, "rb") as src, gzip.open(f"{trace}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace.unlink()
        log.info("profile of %d loop turns written to %s", self._turns, self.out_dir)
