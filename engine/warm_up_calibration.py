"""Real-time admission's warm-up measurements (EngineCore.warm_up, before the engine serves):
what a decode turn costs by its rows, and what a KV page in use adds to it.

- A KV page is priced from the device's memory bandwidth on a GPU (engine/memory_bandwidth.py).
  On a CPU attention over a context is arithmetic, not a copy, and is measured: two bursts of
  `PAGE_BURST_ROWS` requests, short prompts and long ones (`LONG_PROMPT_CHARS`), their median
  decode turns' difference over the difference of the pages they read. voxgate-tiny's
  turns at 21 rows grew from 39 to 58 ms as its streams' contexts grew over 20 s; with pages
  unpriced, a ramp of 32 listeners on 2 cores let in 20-21 streams and 12-21 of them ran late.
  Measured at ~470-token prompts a page costs it 50-54 µs, more than the 19-38 µs the live
  turns of a whole run fit (a CPU's attention costs more a page the longer the context), so
  it prices the dearest turns, near the streams' ends: 13-15 went in, none late
  (BENCHMARKS.md).
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

import functools
import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.api import EngineOverloaded, ModelInputError
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
# A CPU's page price: two bursts of this many requests, each making PAGE_BURST_TOKENS tokens,
# one with the warm-up text and one with a prompt of about LONG_PROMPT_CHARS characters (halved
# until the model takes it), priced only when the long burst reads MIN_PAGE_SPREAD more pages
# a row (below that a turn's noise outweighs the pages' part).
PAGE_BURST_ROWS = 8
PAGE_BURST_TOKENS = 24
LONG_PROMPT_CHARS = 480
MIN_PAGE_SPREAD = 4


def warm_up_request(facts: ModelFacts) -> SpeechRequest:
    """The warm-up's request: a short text held to a first chunk and one more, so that it runs
    every stage (prefill, decode, the codec's first and steady chunks) and no further."""
    return _held_request(facts, WARM_TEXT, facts.first_chunk_tokens + facts.chunk_tokens)


def _held_request(facts: ModelFacts, text: str, tokens: int) -> SpeechRequest:
    """A request for `text` held to exactly `tokens` tokens."""
    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, seed=0)
    return SpeechRequest(text, facts.default_voice, params)


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
        self.capacity = core.scheduler.admission.capacity

    def run(self) -> None:
        core = self.core
        sched = core.scheduler
        self.capacity.clear_live()  # the warm-up request's turns (first-use compiles)
        kept = sched.measured_costs()  # the bursts must not move what sizes first chunks
        sched.admission.calibrating = True
        try:
            self._price_pages()
            bursts = self._turn_bursts()
        finally:
            sched.admission.calibrating = False
            sched.restore_costs(kept)
        for burst in bursts:
            self.capacity.steps.seed(burst.rows, burst.by_rows_s)
        self._report()

    def _price_pages(self) -> None:
        """A KV page's price: its bytes at the copy bandwidth on a GPU, whose bursts then also
        bound a turn's growth by rows (engine/turn_cost.py, slope_bound_by_bursts: a fact of
        the device, where the bursts are the dearer turns); measured on a CPU, where the live
        turns' steeper growth stands."""
        core = self.core
        bandwidth_s = page_seconds(core.device, core.kv_bytes_per_block)
        if bandwidth_s > 0:
            self.capacity.price_pages(bandwidth_s)
            self.capacity.steps.slope_bound_by_bursts = True
            log.info(
                "real-time admission: a KV page in use costs %.3f µs a step (%d bytes at the "
                "measured copy bandwidth)",
                1e6 * bandwidth_s,
                core.kv_bytes_per_block,
            )
            return
        if core.device.type != "cpu":
            return  # a GPU with no memory left to measure: streams judged by their count
        measured = self._measured_page_s()
        self.capacity.price_pages(measured)
        if measured > 0:
            log.info(
                "real-time admission: a KV page in use costs %.1f µs a step (measured: "
                "attention over a longer context)",
                1e6 * measured,
            )

    def _measured_page_s(self) -> float:
        """What a page adds to a decode turn on this device: bursts of PAGE_BURST_ROWS
        requests with short and long prompts, the difference of their median turns over the
        difference of their mean pages read; 0 where the model takes no prompt long enough to
        tell, or the engine cannot hold the burst."""
        core = self.core
        facts = core.model.facts
        rows = min(PAGE_BURST_ROWS, core.config.max_num_seqs)

        def burst(text: str) -> list[tuple[float, int]]:
            make = functools.partial(_held_request, facts, text, PAGE_BURST_TOKENS)
            return self._burst_turns(rows, make)

        try:
            short = burst(WARM_TEXT)
        except (EngineOverloaded, ModelInputError):
            return 0.0  # the pool or the model's context cannot hold even the short burst
        chars = LONG_PROMPT_CHARS
        while short and chars >= 4 * len(WARM_TEXT):
            try:
                long = burst(" ".join([WARM_TEXT] * (chars // (len(WARM_TEXT) + 1))))
            except ModelInputError:
                chars //= 2  # longer than the model takes
                continue
            except EngineOverloaded:
                return 0.0
            if not long:
                return 0.0
            spread = statistics.fmean(p for _, p in long) - statistics.fmean(p for _, p in short)
            if spread < MIN_PAGE_SPREAD * rows:
                return 0.0
            turn_s = statistics.median(s for s, _ in long) - statistics.median(s for s, _ in short)
            return max(0.0, turn_s / spread)
        return 0.0

    def _burst_turns(self, size: int, make: Callable[[], SpeechRequest]) -> list[tuple[float, int]]:
        """`size` requests from `make` stepped together to their end: the (seconds, KV pages)
        of each decode turn at `size` rows. Raises EngineOverloaded (the KV pool cannot hold
        them all) or ModelInputError (the model refuses the request), the engine left idle."""
        core = self.core
        requests = []
        try:
            for _ in range(size):
                requests.append(core.add_request(make()))
        except (EngineOverloaded, ModelInputError):
            for request in requests:
                core.cancel(request.request_id)
            while core.has_work():
                core.step()
            raise
        turns = core.scheduler.admission.calibration_turns
        turns.clear()
        core.restart_turn_timing()  # the step before the burst's is none of its turns
        while core.has_work():
            core.step()
        at_size = [(seconds, pages) for rows, seconds, pages in turns if rows == size]
        turns.clear()
        return at_size

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
        facts = self.core.model.facts
        try:
            turns = self._burst_turns(size, lambda: warm_up_request(facts))
        except EngineOverloaded:
            return None
        page_s = self.capacity.page_s
        at_size = [(seconds, seconds - page_s * pages) for seconds, pages in turns]
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
                core.scheduler.admission.room(core.clock()),
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
