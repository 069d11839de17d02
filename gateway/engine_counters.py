"""The cumulative figures of an engine's stats — its steps, the prompt tokens conversations
reused, the loop totals and the admission refusals by cause — which /metrics exports as
Prometheus counters, so they must never go down. An engine counts them from 0 when it starts:
the supervisor of a dead engine carries the dead one's last figures over and adds them to
its successor's (gateway/supervisor.py), so a restart, of one engine or of one replica of a
pool (whose counters are the replicas' sums), never takes a counter backwards."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.api import EngineStats, LoopTotals


def add_totals(totals: Iterable[LoopTotals]) -> LoopTotals:
    """Loop totals added up, field by field."""
    summed = LoopTotals()
    for each in totals:
        for f in dataclasses.fields(LoopTotals):
            setattr(summed, f.name, getattr(summed, f.name) + getattr(each, f.name))
    return summed


def add_refusals(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Refusals by cause added up."""
    summed: dict[str, int] = {}
    for each in counts:
        for cause, count in list(each.items()):
            summed[cause] = summed.get(cause, 0) + count
    return summed


@dataclass(frozen=True)
class EngineCounters:
    """The counters of an engine's stats."""

    steps: int = 0
    prefix_reused_tokens: int = 0
    totals: LoopTotals = field(default_factory=LoopTotals)
    refusals: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, stats: EngineStats) -> EngineCounters:
        return cls(
            stats.steps, stats.prefix_reused_tokens, stats.totals, dict(stats.admission.refusals)
        )

    def __add__(self, other: EngineCounters) -> EngineCounters:
        return EngineCounters(
            self.steps + other.steps,
            self.prefix_reused_tokens + other.prefix_reused_tokens,
            add_totals((self.totals, other.totals)),
            add_refusals((self.refusals, other.refusals)),
        )

    @property
    def zero(self) -> bool:
        return self == EngineCounters()

    def onto(self, stats: EngineStats) -> EngineStats:
        """`stats` with these counters added to its own (its gauges as they are)."""
        if self.zero:
            return stats
        mine = self + EngineCounters.of(stats)
        return dataclasses.replace(
            stats,
            steps=mine.steps,
            prefix_reused_tokens=mine.prefix_reused_tokens,
            totals=mine.totals,
            admission=dataclasses.replace(stats.admission, refusals=dict(mine.refusals)),
        )
