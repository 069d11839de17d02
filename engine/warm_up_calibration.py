"""Real-time admission's warm-up measurements (EngineCore.warm_up, before the engine serves):
what a decode turn costs by its rows, and what a KV page in use adds to it.

- A KV page is priced from the device's memory bandwidth (engine/memory_bandwidth.py; 0 on a
  CPU, where a turn is judged by its rows).
- Bursts of requests at batch sizes 1, 2, 4, … up to max_num_seqs, each stepped to its end
  (the codec's chunks included), give a decode turn at each size, measured as live turns are
  (the time between two LLM steps' starts while the loop is busy, each less the pages it
  read at that price): the turn cost's seeds (engine/turn_cost.py). The loop's turns after
  the last token, which only wait for the codec's last chunks, are no decode turns: counted
  in, they made a large burst's turns dearer by the size of its last codec job (on an H100
  serving Orpheus, a line by rows 0.0076-0.0157 ms a row steep where the served points'
  fitted -0.003 to +0.003).
- Which turn: where the codec runs inline (a CPU), a turn that runs a codec job is a turn
  every stream waits for, so the figure is the burst's mean turn. Where it runs on a thread
  of its own (CUDA), a burst's first chunks all reach it at once and slow the few turns
  beside that one large job, which steady serving spreads thin: the figure is the median
  turn (on the H100, bursts' lines of 0.0048-0.0062 ms a row, and admission's turn within a
  few % of the served turns to come: BENCHMARKS.md). The median on a CPU had dropped the
  codec's turns and let in a fifth fewer voxgate-tiny streams (a steeper line from cheaper
  small bursts).

Live turns of every size refine both once the engine serves (engine/realtime_capacity.py,
engine/page_price.py).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.api import EngineOverloaded
from engine.memory_bandwidth import page_seconds
from engine.outputs import SpeechRequest
from engine.realtime_capacity import REALTIME_LOAD
from engine.request import SamplingParams

if TYPE_CHECKING:
    from engine.core import EngineCore
    from models.base import ModelFacts

log = logging.getLogger("voxgate.engine")

BUDGET_S = 20.0  # the bursts stop after this long
WARM_TEXT = "Warming up."


def warm_up_request(facts: ModelFacts) -> SpeechRequest:
    """The warm-up's request: a short text held to a first chunk and one more, so that it runs
    every stage (prefill, decode, the codec's first and steady chunks) and no further."""
    tokens = facts.first_chunk_tokens + facts.chunk_tokens
    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, seed=0)
    return SpeechRequest(WARM_TEXT, facts.default_voice, params)


@dataclass(frozen=True)
class Burst:
    """A burst's decode turns at its size (prefill and the codec's tail excluded): their
    figure (the median or the mean: the module's notes), and that of the turns less the KV
    pages each read (the part by rows)."""

    rows: int
    interval_s: float
    by_rows_s: float


class WarmUpCalibration:
    """Runs the bursts on `core` (an EngineCore that is otherwise idle) and leaves their
    figures in its scheduler's real-time capacity."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.capacity = core.scheduler.capacity

    def run(self) -> None:
        core = self.core
        bandwidth_s = page_seconds(core.device, core.kv_bytes_per_block)
        self.capacity.price_pages(bandwidth_s)
        if bandwidth_s > 0:
            log.info(
                "real-time admission: a KV page in use costs %.3f µs a step (%d bytes at the "
                "measured copy bandwidth)",
                1e6 * bandwidth_s,
                core.kv_bytes_per_block,
            )
        sched = core.scheduler
        self.capacity.clear_live()  # the warm-up request's turns (first-use compiles)
        kept = sched.measured_costs()  # the bursts must not move what sizes first chunks
        sched.calibrating = True
        try:
            bursts = self._turn_bursts()
        finally:
            sched.calibrating = False
            sched.restore_costs(kept)
        for burst in bursts:
            self.capacity.steps.seed(burst.rows, burst.by_rows_s)
        self._report()

    def _turn_bursts(self) -> list[Burst]:
        """Bursts at 1, 2, 4, … rows up to max_num_seqs; stops at the first size that already
        falls behind real time (larger ones are refused anyway), when the KV pool cannot
        hold the burst (or it ran no decode turn at its size), or after BUDGET_S."""
        core = self.core
        max_rows = core.config.max_num_seqs
        sizes = sorted({min(2**i, max_rows) for i in range(12)})
        deadline = core.clock() + BUDGET_S
        bursts: list[Burst] = []
        for size in sizes:
            burst = self._burst(size)
            if burst is None:
                break
            bursts.append(burst)
            log.info(
                "real-time admission: batch %d takes %.1f ms a token",
                size,
                1e3 * burst.interval_s,
            )
            if burst.interval_s > self._real_time_limit() or core.clock() > deadline:
                break
        return bursts

    def _real_time_limit(self) -> float:
        return REALTIME_LOAD * self.core.model.facts.seconds_per_token

    def _burst(self, size: int) -> Burst | None:
        """`size` warm-up requests stepped together to their end; None when the KV pool
        cannot hold them all, or no decode turn ran at `size` rows."""
        core = self.core
        requests = []
        try:
            for _ in range(size):
                requests.append(core.add_request(warm_up_request(core.model.facts)))
        except EngineOverloaded:
            for request in requests:
                core.cancel(request.request_id)
            while core.has_work():
                core.step()
            return None
        turns = core.scheduler.calibration_turns
        turns.clear()
        core.restart_turn_timing()  # the step before the burst's is none of its turns
        while core.has_work():
            core.step()
        page_s = self.capacity.page_s
        at_size = [
            (seconds, seconds - page_s * pages) for rows, seconds, pages in turns if rows == size
        ]
        turns.clear()
        if not at_size:
            return None
        figure = statistics.median if self.capacity.threaded_codec else statistics.fmean
        return Burst(
            size,
            figure(seconds for seconds, _ in at_size),
            max(0.0, figure(by_rows for _, by_rows in at_size)),
        )

    def _report(self) -> None:
        core, facts = self.core, self.core.model.facts
        fit = self.capacity.steps.fit()
        if fit is not None:
            log.info(
                "real-time admission: turn %.2f ms + %.3f ms/row (warm-up bursts): room for %s "
                "streams until live turns refine it",
                1e3 * fit.fixed_s,
                1e3 * fit.per_unit_s,
                core.scheduler.room(core.clock()),
            )
        one = self.capacity.token_interval(1)
        if one is not None and one > self._real_time_limit():
            log.warning(
                "%s cannot keep even one stream in real time on this device (%.1f ms a token "
                "for %.1f ms of audio): each stream is served alone, and will stutter",
                facts.name,
                1e3 * one,
                1e3 * facts.seconds_per_token,
            )
