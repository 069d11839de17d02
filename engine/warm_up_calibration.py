"""Real-time admission's warm-up measurements (EngineCore.warm_up, before the engine serves):
what a decode turn costs by its rows, and what a KV page in use adds to it.

- A KV page is first priced from the device's memory bandwidth (engine/memory_bandwidth.py).
- Bursts of requests at batch sizes 1, 2, 4, … up to max_num_seqs, each stepped to its end
  (the codec's chunks included), give the mean turn at each size: the turn cost's seeds
  (engine/turn_cost.py), each less the pages its turns read.
- Where pages are priced (a GPU), one more burst at a size the bursts kept in real time, its
  requests' prompts as long as served streams' contexts, reads many times the pages of the
  short burst of the same size: the difference of the two mean turns over the difference of
  their pages is what a page costs on this device with this model's kernels beside the
  attention's, and replaces the bandwidth's price (engine/page_price.py:price_from_bursts).

Live turns of every size refine both once the engine serves (engine/realtime_capacity.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.api import EngineOverloaded, ModelInputError
from engine.memory_bandwidth import page_seconds
from engine.outputs import SpeechRequest
from engine.page_price import price_from_bursts
from engine.realtime_capacity import REALTIME_LOAD
from engine.request import SamplingParams

if TYPE_CHECKING:
    from engine.core import EngineCore

log = logging.getLogger("voxgate.engine")

BUDGET_S = 20.0  # the turn-cost bursts stop after this long (the page burst comes after)
WARM_TEXT = "Warming up."
# The page burst: at most this many rows, each with a prompt of about this many tokens (a
# served stream's context after ~15 s of Orpheus' audio), using at most this share of the free
# KV pool.
PAGE_BURST_ROWS = 64
PAGE_BURST_CONTEXT = 1536
PAGE_BURST_POOL_SHARE = 0.5
LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog while the river runs past the old mill, "
    "and the miller counts the sacks of grain he will carry to town in the morning. "
)


@dataclass(frozen=True)
class Burst:
    """A burst's decode turns (prefill excluded): their mean seconds, and the median turn and
    median KV pages a turn read (what a page is priced by: a first-use stall moves neither)."""

    rows: int
    interval_s: float
    pages: float
    median_s: float


class WarmUpCalibration:
    """Runs the bursts on `core` (an EngineCore that is otherwise idle) and leaves their
    figures in its scheduler's real-time capacity."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.capacity = core.scheduler.capacity
        facts = core.model.facts
        self.tokens = facts.first_chunk_tokens + facts.chunk_tokens  # a burst request's length

    def run(self) -> None:
        core = self.core
        bandwidth_s = page_seconds(core._device, core._kv_bytes_per_block)
        self.capacity.page_s = bandwidth_s
        if bandwidth_s > 0:
            log.info(
                "real-time admission: a KV page in use costs %.3f µs a step (%d bytes at the "
                "measured copy bandwidth)",
                1e6 * bandwidth_s,
                core._kv_bytes_per_block,
            )
        sched = core.scheduler
        self.capacity.clear_live()  # the warm-up request's turns (first-use compiles)
        kept = sched.measured_costs()  # the bursts must not move what sizes first chunks
        sched.calibrating = True
        try:
            bursts = self._turn_bursts()
            if bandwidth_s > 0 and bursts:
                self._price_pages(bursts, bandwidth_s)
        finally:
            sched.calibrating = False
            sched.restore_costs(kept)
            core._last_llm_start = None
        for burst in bursts:
            self.capacity.steps.seed(
                burst.rows, max(0.0, burst.interval_s - self.capacity.page_s * burst.pages)
            )
        self._report()

    def _turn_bursts(self) -> list[Burst]:
        """Bursts at 1, 2, 4, … rows up to max_num_seqs; stops at the first size that already
        falls behind real time (larger ones are refused anyway), when the KV pool cannot
        hold the burst, or after BUDGET_S."""
        core = self.core
        max_rows = core.config.max_num_seqs
        sizes = sorted({min(2**i, max_rows) for i in range(12)})
        deadline = core.clock() + BUDGET_S
        bursts: list[Burst] = []
        for size in sizes:
            burst = self._burst(size, WARM_TEXT)
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

    def _price_pages(self, bursts: list[Burst], bandwidth_s: float) -> None:
        """The page burst against the short burst of the same size (see the module's notes);
        the bandwidth's price stays where the burst cannot run or tells nothing sure."""
        short = self._page_burst_size(bursts)
        text = self._long_text() if short is not None else None
        if short is None or text is None:
            return
        long = self._burst(short.rows, text)
        if long is None:
            return
        price = price_from_bursts(
            (short.median_s, short.pages), (long.median_s, long.pages), bandwidth_s
        )
        if price is None:
            log.info(
                "real-time admission: the page burst (%d rows, %.0f pages a turn, %.2f ms "
                "against %.2f at %.0f pages) tells no price within bounds: the bandwidth's "
                "%.3f µs a page stands",
                long.rows,
                long.pages,
                1e3 * long.median_s,
                1e3 * short.median_s,
                short.pages,
                1e6 * bandwidth_s,
            )
            return
        self.capacity.page_s = price
        log.info(
            "real-time admission: a KV page in use costs %.3f µs a step, measured (%d rows "
            "reading %.0f pages a turn took %.2f ms, at %.0f pages %.2f ms; the bandwidth "
            "priced %.3f µs)",
            1e6 * price,
            long.rows,
            long.pages,
            1e3 * long.median_s,
            short.pages,
            1e3 * short.median_s,
            1e6 * bandwidth_s,
        )

    def _page_burst_size(self, bursts: list[Burst]) -> Burst | None:
        """The short burst to compare with: the largest size within real time and
        PAGE_BURST_ROWS whose long prompts fit PAGE_BURST_POOL_SHARE of the free pool."""
        blocks = self.core.blocks
        per_row = blocks.blocks_for(PAGE_BURST_CONTEXT + self.tokens)
        room = int(PAGE_BURST_POOL_SHARE * blocks.num_free) // max(1, per_row)
        limit = self._real_time_limit()
        fitting = [
            b for b in bursts if b.rows <= min(PAGE_BURST_ROWS, room) and b.interval_s <= limit
        ]
        return fitting[-1] if fitting else None

    def _long_text(self) -> str | None:
        """A text whose prompt is about PAGE_BURST_CONTEXT tokens (within the model's
        context), None for a model that refuses a long text or cuts it short."""
        model = self.core.model
        most = model.facts.max_context - self.tokens - 1
        target = min(PAGE_BURST_CONTEXT, most)

        def prompt_tokens(text: str) -> int:
            return len(model.preprocess(text, model.facts.default_voice).token_ids)

        try:
            one, two = prompt_tokens(LONG_TEXT), prompt_tokens(2 * LONG_TEXT)
            per_copy = two - one
            if per_copy <= 0:
                return None
            copies = max(1, -(-(target - (one - per_copy)) // per_copy))
            text = LONG_TEXT * copies
            length = prompt_tokens(text)
        except (ModelInputError, ValueError):
            return None
        return text if 0.9 * target <= length <= most else None

    def _burst(self, size: int, text: str) -> Burst | None:
        """`size` requests of `text`, `self.tokens` tokens each, stepped together to their
        end; None when the pool cannot hold them all or the model refuses the text."""
        core = self.core
        params = SamplingParams(max_tokens=self.tokens, min_tokens=self.tokens, seed=0)
        requests = []
        try:
            for _ in range(size):
                spec = SpeechRequest(text, core.model.facts.default_voice, params)
                requests.append(core.add_request(spec))
        except (EngineOverloaded, ModelInputError):
            for request in requests:
                core.cancel(request.request_id)
            while core.has_work():
                core.step()
            return None
        core.step()  # the prefill (a long prompt's may take several steps: not decode turns)
        while core.has_work() and any(r.num_computed < len(r.prompt_ids) for r in requests):
            core.step()
        start = core.clock()
        turns, pages = [], []
        while core.has_work():
            pages.append(sum(len(r.block_table) for r in requests if not r.finished))
            began = core.clock()
            core.step()
            turns.append(core.clock() - began)
        if not turns:
            return Burst(size, 0.0, 0.0, 0.0)
        interval = (core.clock() - start) / len(turns)
        return Burst(size, interval, float(np.median(pages)), float(np.median(turns)))

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
