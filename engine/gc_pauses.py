"""Python's garbage collector in a serving process: keep its full collections short, and count
them.

Why: a loaded engine holds hundreds of thousands of long-lived Python objects (modules,
parameters, compiled kernels' wrappers, captured graphs: 237k for CosyVoice 2's real
configuration on the CPU, more with compiled blocks), and every full (generation-2) collection
walks all of them while holding the GIL: ~110 ms on 2 CPU cores, 125-210 ms on the H200
host. The gateway's event loop, the engine thread and the codec thread stop together for that
long, and a first chunk's listener holds only a few frames. (With the freeze, 60-s runs of
CosyVoice 2 at 11-12 req/s ran no full collection; the late frames that remained were the
encoders': docs/benchmark-history.md.) `freeze_loaded` moves
everything alive after start-up into the collector's permanent generation (vLLM and SGLang do
the same), so later full collections walk only what serving allocates. `GcPauses` times every
collection, for /metrics (`voxgate_gc_pause_seconds`) and the benchmark."""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("voxgate.engine")

# Upper bounds (seconds) of the pause histogram: a 20-ms frame is the scale that matters.
PAUSE_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def freeze_loaded() -> int:
    """Collect once, then exempt every object alive now from later collections; returns how
    many were frozen. Call it once the model is loaded and warmed up: what start-up leaves
    behind lives as long as the process, so walking it again frees nothing. What an earlier
    call froze is thawed first, so a process that builds engine after engine (the tests, an
    embedder) can still free an old one's reference cycles."""
    GC_PAUSES.install()  # the engine's stats report its full collections from now on
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("garbage collector: %d start-up objects frozen out of its full collections", frozen)
    return frozen


@dataclass
class GenerationPauses:
    """Collections of one generation: how many, their total time, and a histogram of their
    lengths (counts per PAUSE_BUCKETS_S bound, cumulative as Prometheus wants them, plus all)."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    le_counts: list[int] = field(default_factory=lambda: [0] * len(PAUSE_BUCKETS_S))

    def add(self, pause_s: float) -> None:
        self.count += 1
        self.total_s += pause_s
        self.max_s = max(self.max_s, pause_s)
        for i, bound in enumerate(PAUSE_BUCKETS_S):
            if pause_s <= bound:
                self.le_counts[i] += 1


class GcPauses:
    """Times every garbage collection of this process (gc.callbacks), by generation. The
    collector runs in whichever thread allocated last and holds the GIL from start to stop,
    so a start is always followed by its own stop and the callback needs no lock. It must
    not take one either: any allocation made while holding it (a snapshot's copies) can
    start a collection in that same thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._began: float | None = None
        self._by_generation = {g: GenerationPauses() for g in range(3)}
        self._installed = False

    def install(self) -> GcPauses:
        with self._lock:
            if not self._installed:
                gc.callbacks.append(self._on_gc)
                self._installed = True
        return self

    def uninstall(self) -> None:
        with self._lock:
            if self._installed:
                gc.callbacks.remove(self._on_gc)
                self._installed = False

    def snapshot(self) -> dict[int, GenerationPauses]:
        return {
            g: GenerationPauses(p.count, p.total_s, p.max_s, list(p.le_counts))
            for g, p in self._by_generation.items()
        }

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._began = now
            return
        began, self._began = self._began, None
        if began is not None:  # None: installed mid-collection
            self._by_generation[info["generation"]].add(now - began)


# One per process: the collector is process-wide, and so are its pauses (two apps in one
# process, as in the tests, report the same figures).
GC_PAUSES = GcPauses()


def with_full_collections(totals):
    """`totals` (engine/outputs.py LoopTotals, a snapshot) with this process's full
    collections so far, for the engine's stats: a full collection stops the engine's loop
    too, and in an engine process the gateway's /metrics cannot see it otherwise."""
    full = GC_PAUSES.snapshot()[2]
    totals.gc_full, totals.gc_full_s = full.count, full.total_s
    return totals
