"""Real-time admission's warm-up (engine/warm_up_calibration.py): the turn cost's bursts and
the page burst that measures what a KV page in use adds to a turn."""

from __future__ import annotations

import pytest
import torch

from engine import warm_up_calibration
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.page_price import MIN_PAGE_CONTRAST, PRICE_BOUNDS, price_from_bursts

PAGE_S = 0.24e-6  # a page's price on an H200 serving Orpheus with fp8 pages


def turn(rows: int, pages: float, fixed_s: float = 0.004, per_row_s: float = 2e-5) -> float:
    return fixed_s + per_row_s * rows + PAGE_S * pages


def test_two_bursts_at_like_rows_price_a_page_by_their_difference():
    short, long = (turn(64, 400), 400), (turn(64, 6400), 6400)
    assert price_from_bursts(short, long, bandwidth_s=0.26e-6) == pytest.approx(PAGE_S)


@pytest.mark.parametrize(
    "long_pages, bandwidth_s",
    [
        (MIN_PAGE_CONTRAST * 400 - 1, 0.26e-6),  # too few pages more to tell
        (6400, 0.0),  # pages unpriced (a CPU): nothing to refine
        (6400, PAGE_S / PRICE_BOUNDS[1] / 1.01),  # dearer than any price the bounds allow
        (6400, PAGE_S / PRICE_BOUNDS[0] * 1.01),  # cheaper
    ],
)
def test_a_page_burst_that_tells_nothing_sure_keeps_the_bandwidths_price(long_pages, bandwidth_s):
    short, long = (turn(64, 400), 400), (turn(64, long_pages), long_pages)
    assert price_from_bursts(short, long, bandwidth_s) is None


class DeviceClock:
    """The engine's clock, advanced by each step as a GPU's turn would take: a fixed part, a
    part a row and `page_s` a KV page the step's rows read. Nothing else moves it, so the
    warm-up's measurements are exact and the machine's load does not matter."""

    def __init__(self, page_s: float, fixed_s: float = 0.004, row_s: float = 0.0002) -> None:
        self.now, self.page_s, self.fixed_s, self.row_s = 0.0, page_s, fixed_s, row_s

    def __call__(self) -> float:
        return self.now

    def turn(self, core: EngineCore) -> None:
        running = list(core.scheduler.requests.values())
        pages = sum(len(r.block_table) for r in running)
        self.now += self.fixed_s + self.row_s * len(running) + self.page_s * pages


def test_the_warm_up_measures_a_pages_price_on_a_real_engine(monkeypatch, caplog):
    """tiny-orpheus on the CPU, on a clock that turns as a GPU's decode would, its pages dearer
    than the bandwidth says: the warm-up's page burst finds the true price, admission takes it,
    and the turn cost's seeds are the bursts' turns less their pages."""
    from models.registry import load_model

    page_s = 0.24e-6
    clock = DeviceClock(page_s)
    step = EngineCore.step

    def timed_step(core: EngineCore):
        clock.turn(core)
        return step(core)

    monkeypatch.setattr(EngineCore, "step", timed_step)
    bandwidth_s = 1.2 * page_s
    monkeypatch.setattr(warm_up_calibration, "page_seconds", lambda device, nbytes: bandwidth_s)
    monkeypatch.setattr(warm_up_calibration, "PAGE_BURST_CONTEXT", 256)
    threads = torch.get_num_threads()
    model = load_model("tiny-orpheus")
    core = EngineCore(model, EngineConfig(max_num_seqs=16), torch.device("cpu"), "sdpa", clock)
    try:
        with caplog.at_level("INFO", logger="voxgate.engine"):
            core.warm_up()
        capacity = core.scheduler.capacity
        assert "a step, measured (" in caplog.text, caplog.text[-3000:]
        assert capacity.page_s == pytest.approx(page_s, rel=0.02)
        # The seeds are the bursts' turns less their pages: the clock's line by rows.
        fit = capacity.steps.fit()
        assert fit.fixed_s == pytest.approx(clock.fixed_s, rel=0.05)
        assert fit.per_unit_s == pytest.approx(clock.row_s, rel=0.05)
        assert core.scheduler.requests == {} and core.blocks.num_used == 0
        assert core.scheduler.refusals == {} or not any(core.scheduler.refusals.values())
        assert capacity.steps.live_turns == 0 and not capacity.pages.learned
    finally:
        core.close()
        torch.set_num_threads(threads)
