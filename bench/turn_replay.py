"""How well real-time admission's turn cost model foresaw the turns that came: replayed offline
over a served run's measured turns.

Real-time admission prices the decode turns to come from the turns it has measured
(engine/turn_cost.py: a line by rows, floored by smaller sizes' medians; engine/page_price.py:
a price a KV page read). Every `voxgate bench --serve` run traces those turns
(engine/request_trace.py: `"turns"` lines, with the warm-up's figures in a `"turn_model"`
line). This feeds them, in order, to the same model, takes what it would predict every
`--every` seconds, and sets each prediction against the turns measured `--horizons` seconds
later at their own rows and pages: a ratio over 1 is a model dearer than what came. The turns'
rows and pages are the ones that really ran, so only the cost model is judged, not the
outlook's guess of who decodes when.

    python bench/turn_replay.py run.trace.jsonl.gz [--horizons 1,5,10,20] [--every 1]
    python bench/turn_replay.py run.trace.jsonl.gz --floor-samples 32   # a what-if
    python bench/turn_replay.py run.trace.jsonl.gz --no-floors

Each line is one second of the run's turns: their count, mean rows, pages and seconds, then
the model's prediction for them from each horizon before, as a ratio of the measured mean.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from engine import turn_cost
from engine.realtime_capacity import RealtimeCapacity
from engine.request_trace import TurnLog, read_turns


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
    )
    capacity.steps = turn_cost.TurnCostModel(window=window, page_price=capacity.pages.seconds)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a served run's request trace (.trace.jsonl[.gz])")
    parser.add_argument("--horizons", default="1,5,10,20", help="seconds ahead, comma-separated")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between predictions")
    parser.add_argument(
        "--floor-samples",
        type=int,
        default=None,
        help="what-if: turns of a size before their median floors the turn",
    )
    parser.add_argument("--no-floors", action="store_true", help="what-if: the line alone")
    parser.add_argument(
        "--window",
        type=int,
        default=turn_cost.LIVE_WINDOW,
        help="what-if: live turns the line is fitted to",
    )
    args = parser.parse_args(argv)
    try:
        horizons = [float(h) for h in args.horizons.split(",")]
    except ValueError as exc:
        parser.error(f"--horizons: {exc}")
    try:
        log = read_turns(args.trace)
    except (OSError, ValueError, KeyError) as exc:
        parser.exit(2, f"error: cannot read {args.trace} as a request trace: {exc}\n")
    if not log.turns:
        parser.exit(
            2,
            f"error: {args.trace} has no measured turns (traced since engine/"
            "request_trace.py's TURNS_PER_LINE lines; an older run's trace has none)\n",
        )
    if args.floor_samples is not None:
        turn_cost.FLOOR_SAMPLES = args.floor_samples
    if args.no_floors:
        turn_cost.FLOOR_SAMPLES = math.inf
    rows = by_second(log, replay(log, args.every, args.window), horizons)
    heads = [f"pred@{h:g}s" for h in horizons]
    print(
        f"{'s':>4} {'turns':>5} {'rows':>6} {'pages':>7} {'turn ms':>8}  "
        + " ".join(f"{h:>9}" for h in heads)
    )
    for line in rows:
        ratios = " ".join(f"{line[f'at_{h:g}s']:9.2f}" for h in horizons)
        print(
            f"{line['second']:4d} {line['turns']:5d} {line['rows']:6.1f} {line['pages']:7.0f} "
            f"{line['turn_ms']:8.2f}  {ratios}"
        )
    for h in horizons:
        ratios = np.array([line[f"at_{h:g}s"] for line in rows])
        weights = np.array([line["turns"] for line in rows], dtype=np.float64)
        ok = ~np.isnan(ratios)
        if ok.any():
            mean = float(np.average(ratios[ok], weights=weights[ok]))
            print(
                f"predicted {h:g} s ahead over measured, turn-weighted: {mean:.3f} "
                f"(seconds {ratios[ok].min():.2f}-{ratios[ok].max():.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
