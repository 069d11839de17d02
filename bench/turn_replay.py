"""How well real-time admission's turn cost model foresaw the turns that came, second by second:
replayed offline over a served run's measured turns (the method: voxbench/turn_accuracy.py;
`voxgate bench --serve` reports the point's whole in its `admission` line).

    python bench/turn_replay.py run.trace.jsonl.gz [--horizons 1,5,10,20] [--every 1]
    python bench/turn_replay.py run.trace.jsonl.gz --floor-samples 32   # a what-if
    python bench/turn_replay.py run.trace.jsonl.gz --no-floors

Each line is one second of the run's turns: their count, mean rows, pages and seconds, then
the model's prediction for them from each horizon before, as a ratio of the measured mean.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from engine import turn_cost
from engine.request_trace import read_turns
from voxbench.turn_accuracy import by_second, replay


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
