"""How well real-time admission's turn cost model foresaw the turns that came, from a served
run's request trace (engine/request_trace.py: every decode turn admission measured, and the
warm-up's figures): the same model fed those turns in order, its predictions taken every
second and set against the turns measured some seconds later at their own rows and KV pages.
A ratio over 1 is a model dearer than what came. The turns' rows and pages are the ones that
really ran, so only the cost model is judged, not the outlook's guess of who decodes when.
`voxgate bench --serve` reports it for each capacity point; bench/turn_replay.py prints it
second by second, with what-ifs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import turn_cost
from engine.realtime_capacity import RealtimeCapacity
from engine.request_trace import TurnLog

HORIZONS_S = (1.0, 5.0, 10.0, 20.0)  # how far ahead predictions are judged


@dataclass(frozen=True)
class Snapshot:
    """What the model would predict at `time`: the turn's part by rows at 1..len(by_rows)
    rows, and a KV page's price."""

    time: float
    by_rows: np.ndarray
    page_s: float

    def predict(self, rows: np.ndarray, pages: np.ndarray) -> np.ndarray:
        at = np.clip(rows, 1, len(self.by_rows)) - 1
        return self.by_rows[at] + self.page_s * pages


def replay(
    log: TurnLog, every_s: float = 1.0, window: int = turn_cost.LIVE_WINDOW
) -> list[Snapshot]:
    """The model fed `log`'s turns in order (as RealtimeCapacity.observe_turn books them), its
    predictions taken every `every_s` seconds of the engine clock from the first turn on."""
    if not log.turns:
        return []
    capacity = RealtimeCapacity(
        seconds_per_token=1.0,
        chunk_tokens=1,
        max_num_seqs=1,
        max_detok_batch=1,
        threaded_codec=True,
        turn_window=window,
    )
    if log.model is not None:
        capacity.price_pages(log.model["page_s"])
        capacity.steps.slope_bound_by_bursts = bool(log.model["slope_bound_by_bursts"])
        for rows, seconds in log.model["seeds"]:
            capacity.steps.seed(int(rows), float(seconds))
    most = max(rows for _, rows, _, _ in log.turns)
    grid = np.arange(1, most + 1)
    snapshots: list[Snapshot] = []
    next_at = log.turns[0][0]
    for time, rows, pages, seconds in log.turns:
        while time >= next_at and capacity.calibrated:
            by_rows = capacity.steps.predict_rows(grid)
            snapshots.append(Snapshot(next_at, by_rows, capacity.page_s))
            next_at += every_s
        capacity.observe_turn(rows, seconds, pages)
    return snapshots


def by_second(
    log: TurnLog, snapshots: list[Snapshot], horizons: list[float]
) -> list[dict[str, float]]:
    """Per second of turns: their count, mean rows, pages and seconds, and for each horizon h
    the mean prediction, from the last snapshot at least h seconds before the second began,
    over the measured mean (NaN where there is none yet)."""
    turns = np.array(log.turns, dtype=np.float64)
    start = turns[0, 0]
    second = np.floor(turns[:, 0] - start).astype(int)
    times = np.array([s.time for s in snapshots])
    out = []
    for s in np.unique(second):
        chosen = turns[second == s]
        rows, pages, secs = chosen[:, 1].astype(int), chosen[:, 2], chosen[:, 3]
        line = {
            "second": int(s),
            "turns": len(chosen),
            "rows": float(rows.mean()),
            "pages": float(pages.mean()),
            "turn_ms": 1e3 * float(secs.mean()),
        }
        for h in horizons:
            at = np.searchsorted(times, start + s - h, side="right") - 1
            line[f"at_{h:g}s"] = (
                float(snapshots[at].predict(rows, pages).mean() / secs.mean())
                if at >= 0 and snapshots
                else math.nan
            )
        out.append(line)
    return out


def accuracy(
    log: TurnLog, since: float, until: float, horizons: tuple[float, ...] = HORIZONS_S
) -> dict[str, float | None]:
    """For each horizon h, the model's predictions made h seconds before over the turns
    measured in [since, until) (engine clock), turn-weighted over the seconds (None where the
    window had no turn, or no prediction was made that far before it)."""
    snapshots = replay(log)
    inside = [t for t in log.turns if since <= t[0] < until]
    out: dict[str, float | None] = {f"{h:g}s": None for h in horizons}
    if not inside or not snapshots:
        return out
    lines = by_second(TurnLog(log.model, inside), snapshots, list(horizons))
    for h in horizons:
        pairs = [(line[f"at_{h:g}s"], line["turns"]) for line in lines]
        pairs = [(ratio, n) for ratio, n in pairs if not math.isnan(ratio)]
        if pairs:
            total = sum(n for _, n in pairs)
            out[f"{h:g}s"] = round(sum(r * n for r, n in pairs) / total, 3)
    return out
