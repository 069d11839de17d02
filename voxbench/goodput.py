"""Goodput: the highest request rate at which the SLO holds (p90 TTFA ≤ 500 ms AND viability
≥ 99 %, docs/benchmarking.md), found by evaluating rate points.

The search is pure: it is handed `evaluate(rate) -> passed` (one full rate point, run by the
caller) and decides which rates to try:

1. explicit `rates`, ascending, up to the first that fails; or, without them, doubling from
   `start_rate` while points pass. Either way, if the first rate fails, halving from it down
   to `min_rate` until one passes;
2. `bisect_steps` midpoints between the highest pass and the lowest failure above it.

Goodput is the highest passing rate below the lowest failing one (0 when none passed): a
noisy pass above a failure is reported among the points but not trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


def nice_rate(rate: float) -> float:
    """Three significant digits, so bisected rates read well and repeat exactly."""
    return float(f"{rate:.3g}")


@dataclass(frozen=True)
class SearchSettings:
    rates: tuple[float, ...] = ()  # explicit rates; empty: doubling from start_rate
    start_rate: float = 1.0
    max_rate: float = 128.0
    min_rate: float = 0.125
    bisect_steps: int = 2
    max_points: int = 12

    def __post_init__(self) -> None:
        if any(r <= 0 for r in self.rates) or self.start_rate <= 0 or self.min_rate <= 0:
            raise ValueError("request rates must be > 0")
        if self.max_rate < self.start_rate:
            raise ValueError(f"max rate {self.max_rate} is below the start rate {self.start_rate}")
        if self.bisect_steps < 0 or self.max_points < 1:
            raise ValueError("bisect steps must be >= 0 and max points >= 1")


@dataclass
class SearchResult:
    goodput: float  # req/s; 0.0 when no rate passed
    points: list[tuple[float, bool]] = field(default_factory=list)  # (rate, passed) in run order
    ended_by: str | None = None  # "max_points" or "budget" when the search was cut short


class _Halt(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def goodput_of(points: list[tuple[float, bool]]) -> float:
    failing = [r for r, ok in points if not ok]
    ceiling = min(failing) if failing else float("inf")
    passing = [r for r, ok in points if ok and r < ceiling]
    return max(passing, default=0.0)


def search_goodput(
    evaluate: Callable[[float], bool | None], settings: SearchSettings
) -> SearchResult:
    """`evaluate` returns whether the point passed, or None when it could not be run (out of
    time budget): the search then stops with what it has."""
    result = SearchResult(0.0)
    tried: dict[float, bool] = {}

    def ev(rate: float) -> bool:
        rate = nice_rate(rate)
        if rate in tried:
            return tried[rate]
        if len(tried) >= settings.max_points:
            raise _Halt("max_points")
        passed = evaluate(rate)
        if passed is None:
            raise _Halt("budget")
        tried[rate] = passed
        result.points.append((rate, passed))
        return passed

    try:
        if settings.rates:
            ordered = sorted(settings.rates)
            for rate in ordered:
                if not ev(rate):
                    break
            if not tried[nice_rate(ordered[0])]:
                _halve(ev, ordered[0], settings.min_rate)
        else:
            _double_or_halve(ev, settings)
        for _ in range(settings.bisect_steps):
            lo, hi = goodput_of(result.points), _lowest_failure(result.points)
            if lo <= 0 or hi is None or nice_rate((lo + hi) / 2) in (lo, hi):
                break
            ev((lo + hi) / 2)
    except _Halt as halt:
        result.ended_by = halt.reason
    result.goodput = goodput_of(result.points)
    return result


def _double_or_halve(ev: Callable[[float], bool], s: SearchSettings) -> None:
    rate = s.start_rate
    if ev(rate):
        while rate * 2 <= s.max_rate and ev(rate * 2):
            rate *= 2
    else:
        _halve(ev, rate, s.min_rate)


def _halve(ev: Callable[[float], bool], failed: float, min_rate: float) -> None:
    rate = failed
    while rate / 2 >= min_rate and not ev(rate / 2):
        rate /= 2


def _lowest_failure(points: list[tuple[float, bool]]) -> float | None:
    passing = goodput_of(points)
    above = [r for r, ok in points if not ok and r > passing]
    return min(above, default=None)
