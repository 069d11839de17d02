"""Judges a run's refusals again, offline, with one of the outlook's inputs changed: which input
decided them.

`voxgate serve --trace-requests FILE` (on in every `voxgate bench --serve` run) writes each
request refused at submit with what real-time admission's outlook read (engine/request_trace.py:
the streams' contexts, remaining tokens and banked audio, the turn's part by rows, the KV page's
price). This replays each refusal through the same outlook (engine/realtime_outlook.py), as
recorded and under each variant, and says how many each variant would have admitted:

    python bench/replay_refusals.py run.trace.jsonl.gz
    python bench/replay_refusals.py run.trace.jsonl.gz --page-us 0.229 --turn-ms 2.72,0.0051

With no variant given it tries a standard set: the page's price 10 % lower, the turn's part by
rows 10 % lower, the banked audio credited up to 30 s (the default `--max-lead-s`, the lead
cap while no listener is short), the whole of a token's playback as the budget (not
REALTIME_LOAD of it). A variant that admits most refusals names the input that decided. Only
refusals the record reproduces (judged again as recorded, still refused) are counted.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import numpy as np

from engine.realtime_capacity import REALTIME_LOAD
from engine.realtime_outlook import OutlookInputs, TurnModel
from engine.request_trace import read_refusals

Variant = Callable[[OutlookInputs], OutlookInputs]


def page_price(seconds: float) -> Variant:
    return lambda o: dataclasses.replace(o, turn=dataclasses.replace(o.turn, page_s=seconds))


def page_scale(factor: float) -> Variant:
    return lambda o: page_price(o.turn.page_s * factor)(o)


def turn_line(fixed_s: float, per_row_s: float) -> Variant:
    def apply(o: OutlookInputs) -> OutlookInputs:
        turn = dataclasses.replace(o.turn, by_rows=lambda r: fixed_s + per_row_s * r)
        return dataclasses.replace(o, turn=turn)

    return apply


def turn_scale(factor: float) -> Variant:
    def apply(o: OutlookInputs) -> OutlookInputs:
        by_rows = o.turn.by_rows
        turn: TurnModel = dataclasses.replace(o.turn, by_rows=lambda r: factor * by_rows(r))
        return dataclasses.replace(o, turn=turn)

    return apply


def lead_cap(seconds: float) -> Variant:
    return lambda o: dataclasses.replace(o, lead_cap_s=seconds)


def budget_scale(factor: float) -> Variant:
    return lambda o: dataclasses.replace(o, budget_s=o.budget_s * factor)


def standard_variants() -> dict[str, Variant]:
    return {
        "page price -10 %": page_scale(0.9),
        "turn by rows -10 %": turn_scale(0.9),
        "lead credited to 30 s": lead_cap(30.0),
        "budget at 100 %": budget_scale(1.0 / REALTIME_LOAD),
    }


def replay(refusals: list[dict], variants: dict[str, Variant]) -> list[str]:
    """Lines of a report: each outlook refusal as recorded and under each variant, then how
    many of those the record reproduces each variant admits."""
    judged = [r for r in refusals if r.get("outlook")]
    lines = [
        f"{len(refusals)} refusals, {len(judged)} by the streams' outlook"
        + (f" (others: {_other_causes(refusals)})" if len(judged) < len(refusals) else "")
    ]
    if not judged:
        return lines
    start = judged[0]["arrival"]
    admitted = dict.fromkeys(variants, 0)
    reproduced = 0
    for refusal in judged:
        inputs = OutlookInputs.from_record(refusal["outlook"])
        short = inputs.shortfall()
        streams = sum(1 for s in inputs.streams if s.listened)
        banked = [s.banked_s for s in inputs.streams if s.listened]
        head = (
            f"+{refusal['arrival'] - start:6.2f} s  {streams:4d} streams  banked p50 "
            f"{np.median(banked):.2f} s  page {1e6 * inputs.turn.page_s:.3f} µs  "
        )
        if short is None:
            lines.append(head + "admits as recorded: not reproduced, not counted")
            continue
        reproduced += 1
        head += f"short {short.behind_s:.2f} s at {short.after_s:.0f} s"
        verdicts = []
        for name, variant in variants.items():
            ok = variant(inputs).shortfall() is None
            admitted[name] += ok
            verdicts.append(f"{name}: {'admits' if ok else 'refuses'}")
        lines.append(head + "  |  " + "; ".join(verdicts))
    lines.append(
        f"admitted of the {reproduced} reproduced: "
        + "; ".join(f"{name} {count}" for name, count in admitted.items())
    )
    return lines


def _other_causes(refusals: list[dict]) -> str:
    """The refusals not by the outlook, counted by cause."""
    counts: dict[str, int] = {}
    for r in refusals:
        if not r.get("outlook"):
            counts[r["cause"]] = counts.get(r["cause"], 0) + 1
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="a --trace-requests file (.jsonl or .jsonl.gz)")
    ap.add_argument("--page-us", type=float, help="price a KV page at this many µs")
    ap.add_argument(
        "--turn-ms", help="the turn's part by rows as FIXED,PER_ROW in ms (e.g. 2.72,0.0051)"
    )
    ap.add_argument("--lead-cap-s", type=float, help="credit banked audio up to this lead")
    args = ap.parse_args(argv)
    variants: dict[str, Variant] = {}
    if args.page_us is not None:
        variants[f"page {args.page_us} µs"] = page_price(args.page_us * 1e-6)
    if args.turn_ms:
        try:
            fixed, per_row = (float(x) for x in args.turn_ms.split(","))
        except ValueError:
            ap.error(f"--turn-ms takes FIXED,PER_ROW in ms, got {args.turn_ms!r}")
        variants[f"turn {fixed}+{per_row}/row ms"] = turn_line(fixed / 1e3, per_row / 1e3)
    if args.lead_cap_s is not None:
        variants[f"lead cap {args.lead_cap_s} s"] = lead_cap(args.lead_cap_s)
    if not variants:
        variants = standard_variants()
    try:
        refusals = read_refusals(args.trace)
    except (OSError, ValueError) as exc:
        ap.exit(2, f"error: cannot read {args.trace} as a request trace file: {exc}\n")
    print("\n".join(replay(refusals, variants)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
