"""The server's /metrics read once a second through a bench point, on a thread of its own.

Each reading keeps what the point's reports need from one scrape: the engine loop's
cumulative counters (voxbench/engine_loop.py), the KV pages in use, and real-time admission's
refusals and predicted room (voxbench/admission_view.py). The first and last readings bound the
point (its loop profile, its refusals); the ones between say how the point went second by
second: the LLM's and the codec's shares of the GPU (`gpu_shares`), the steps' pace and cost
against the pages they read (`steps_by_second`) and the room admission predicted
(`room_by_second`), read beside the late frames by second.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from voxbench.admission_view import parse_admission
from voxbench.engine_loop import parse_loop_totals
from voxbench.servers import gauges, metrics_body


@dataclass(frozen=True)
class MetricsReading:
    """One scrape, `t` seconds after sampling began; None where the server did not answer
    (or, for `loop`, has no engine loop counters)."""

    t: float
    loop: dict[str, float] | None
    admission: dict[str, Any] | None
    kv_pages: float | None = None  # voxgate_engine_kv_blocks_used


KV_PAGES_GAUGE = "voxgate_engine_kv_blocks_used"


def parse_reading(t: float, body: str | None) -> MetricsReading:
    if body is None:
        return MetricsReading(t, None, None)
    kv_pages = gauges(body, (KV_PAGES_GAUGE,)).get(KV_PAGES_GAUGE)
    return MetricsReading(t, parse_loop_totals(body), parse_admission(body), kv_pages)


class MetricsSampler:
    """Reads `http`'s /metrics now and then every `period_s` until `stop()`."""

    def __init__(self, http: str, period_s: float = 1.0) -> None:
        self.http, self.period_s = http, period_s
        self._began = time.monotonic()
        self._readings = [self._read()]  # the point's start, before the thread runs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def _read(self) -> MetricsReading:
        return parse_reading(time.monotonic() - self._began, metrics_body(self.http))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._readings.append(self._read())

    def stop(self) -> list[MetricsReading]:
        """Stop sampling, with a last reading for the point's end; every reading, in order."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._readings.append(self._read())
        return list(self._readings)
