"""A KV page's price learned from the live turns (engine/page_price.py): the warm-up's price
until the turns tell it apart from the rows' part, within bounds of it."""

from __future__ import annotations

import random

import pytest

from engine import page_price
from engine.page_price import MIN_TURNS, PRICE_BOUNDS, REFIT_TURNS, PagePrice
from engine.realtime_capacity import RealtimeCapacity
from engine.scheduler import ChunkingFacts
from voxbench.realtime_sim import RealtimeSim, TurnCost, steady_arrivals

TRUE_PRICE = 0.228e-6  # Orpheus' fp8 pages served on an H200 (BENCHMARKS.md)


def turn_s(rows: int, pages: int, jitter: random.Random, noise_s: float = 0.00045) -> float:
    return 0.00295 + 0.000004 * rows + TRUE_PRICE * pages + jitter.gauss(0.0, noise_s)


def steady_turns(price: PagePrice, count: int, seed: int = 0) -> None:
    """Turns of 200-340 rows whose streams are of every age: pages vary at like rows."""
    jitter = random.Random(seed)
    for _ in range(count):
        rows, pages = jitter.randint(200, 340), jitter.randint(5_000, 45_000)
        price.observe(rows, pages, turn_s(rows, pages, jitter))


def test_the_warm_up_price_stands_until_the_turns_tell_better():
    price = PagePrice()
    assert price.seconds() == 0.0  # unpriced (a CPU): nothing to learn
    price.prior_s = 0.257e-6
    steady_turns(price, MIN_TURNS - 1)
    assert price.seconds() == 0.257e-6 and not price.learned
    steady_turns(price, REFIT_TURNS, seed=1)
    assert price.seconds() == pytest.approx(TRUE_PRICE, rel=0.03)
    assert price.learned


def test_a_stalled_turn_moves_nothing():
    price = PagePrice()
    price.prior_s = 0.257e-6
    steady_turns(price, 1024)
    clean = price.seconds()
    for _ in range(REFIT_TURNS):  # collections at the most pages: 40 ms each
        price.observe(340, 45_000, 0.040)
    assert price.seconds() == pytest.approx(clean, rel=0.02)


def test_turns_whose_pages_grow_with_their_rows_teach_nothing():
    """A ramp of arrivals: pages grow in step with rows, and the turns' noise hides which of
    the two costs what. The warm-up's price stands."""
    price = PagePrice()
    price.prior_s = 0.257e-6
    jitter = random.Random(0)
    for i in range(2048):
        rows = 1 + i // 8
        pages = 60 * rows
        price.observe(rows, pages, turn_s(rows, pages, jitter))
    assert price.seconds() == 0.257e-6 and not price.learned


def test_the_learned_price_stays_within_bounds_of_the_warm_ups():
    low, high = PRICE_BOUNDS
    for prior, bound in ((0.5e-6, low), (0.1e-6, high)):  # 2.2x too dear, 2.3x too cheap
        price = PagePrice()
        price.prior_s = prior
        steady_turns(price, 1024)
        assert price.seconds() == pytest.approx(bound * prior)


def test_admission_books_live_turns_at_the_learned_price():
    capacity = RealtimeCapacity(0.01, 8, 512, 64, threaded_codec=True)
    capacity.price_pages(0.257e-6)
    assert capacity.page_s == 0.257e-6
    jitter = random.Random(0)
    for _ in range(MIN_TURNS + REFIT_TURNS):
        rows, pages = jitter.randint(200, 340), jitter.randint(5_000, 45_000)
        capacity.observe_turn(rows, turn_s(rows, pages, jitter, noise_s=0.0001), pages)
    assert capacity.page_s == pytest.approx(TRUE_PRICE, rel=0.03)
    fit = capacity.steps.fit()  # the turns' part by rows, less their pages at that price
    assert fit.at(300) == pytest.approx(0.00295 + 0.000004 * 300, abs=0.0005)


# Page-bound turns (a GPU at a hundred streams) with 1 ms of jitter, listeners of 800 tokens
# (32 s) arriving at 10 a second for 30 s; the warm-up priced a page 20 % too dear.
PAGED = TurnCost(
    fixed_s=0.008, per_row_s=0.0001, prompt_token_s=0.00002, per_page_s=6e-6, noise_s=0.001
)
FACTS = ChunkingFacts(first_chunk_tokens=4, chunk_tokens=8, seconds_per_token=0.04)


def run_paged(learn: bool, monkeypatch) -> tuple[RealtimeSim, object]:
    if not learn:
        monkeypatch.setattr(page_price, "MIN_TURNS", 10**9)
    seeds = {rows: PAGED.seen(rows, 0, 2 * rows) for rows in (1, 8, 64, 128)}
    sim = RealtimeSim(PAGED, FACTS, seeds)
    sim.scheduler.admission.capacity.price_pages(1.2 * PAGED.per_page_s)
    return sim, sim.run(steady_arrivals(300, 10), stream_tokens=800, until_s=30)


def test_a_page_priced_too_dear_at_warm_up_is_learned_and_no_admitted_stream_runs_late(
    monkeypatch,
):
    with monkeypatch.context() as unlearned:
        _, dear = run_paged(False, unlearned)
    sim, learned = run_paged(True, monkeypatch)
    assert sim.scheduler.admission.capacity.pages.learned
    assert sim.scheduler.admission.capacity.page_s == pytest.approx(PAGED.per_page_s, rel=0.03)
    for result in (dear, learned):
        assert result.admitted > 50
        assert not result.late_streams and result.worst_lead_s == 0.0


def test_a_price_learned_later_rebooks_every_turn_in_the_window():
    """Live turns are booked less their pages at the price of the fit, not of the turn: when
    the price moves, the turns just measured are still predicted as measured at their own
    rows and pages (booked at the old price, a cheaper new one would predict them short by
    the difference times their pages: 1.4 ms of a 10-ms turn at 27,000 pages and 0.05 µs)."""
    capacity = RealtimeCapacity(0.01, 8, 512, 64, threaded_codec=True)
    capacity.price_pages(0.30e-6)
    jitter = random.Random(0)
    turns = []
    for _ in range(200):
        rows, pages = jitter.randint(190, 210), jitter.randint(20_000, 27_000)
        seconds = turn_s(rows, pages, jitter, noise_s=0.00005)
        capacity.observe_turn(rows, seconds, pages)
        turns.append((rows, pages, seconds))
    for price in (0.30e-6, 0.24e-6, 0.36e-6):
        capacity.pages.prior_s = price  # the price the next fit reads
        assert capacity.page_s == price
        line = capacity.steps.fit()  # the part by rows (its floors aside)
        errors = [line.at(rows) + price * pages - seconds for rows, pages, seconds in turns]
        assert abs(sum(errors) / len(errors)) < 0.0002  # within 2 % of a ~9-ms turn
