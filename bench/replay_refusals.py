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
cap while no listener is short), the budget 5 % larger than REALTIME_LOAD of a token's
playback, and where the records carry the turn's fitted line, the turn as that
line alone, without the floors that turns measured at smaller sizes set (engine/turn_cost.py:
in a ramp they can be the dear turns of one crowded second). A variant that admits most
refusals names the input that decided. Only refusals the record reproduces (judged again as
recorded, still refused) are counted.

The listener guard's refusals (engine/listener_guard.py) carry no outlook: for each moment
they came, the streams' timelines say what the settled listeners held then, the audio
delivered to them and the audio in codec jobs not yet out, beside the line the refusal
names, so a guard that refused while its listeners were comfortable shows as such.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable

import numpy as np

from engine.listener_guard import SETTLED_AFTER_S
from engine.realtime_outlook import OutlookInputs, TurnModel
from engine.refusal_causes import RefusalCause
from engine.request_trace import read_refusals, read_traces

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


def without_floors(o: OutlookInputs) -> OutlookInputs:
    """The turn by rows as its fitted line alone, without the floors of the sizes measured
    (records that carry the line: traces written since it was recorded)."""
    if o.turn.line_s is None:
        raise ValueError("the record has no turn line")
    return turn_line(*o.turn.line_s)(o)


def standard_variants(with_line: bool = False) -> dict[str, Variant]:
    """The what-ifs every report shows; `with_line`: the records carry the turn's fitted line,
    so the floors' part can be taken out too."""
    variants = {
        "page price -10 %": page_scale(0.9),
        "turn by rows -10 %": turn_scale(0.9),
        "lead credited to 30 s": lead_cap(30.0),
        "budget 5 % larger": budget_scale(1.05),
    }
    if with_line:
        variants["turn without its floors"] = without_floors
    return variants


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


# The guard's refusals of one moment (a burst of arrivals, each refused) are read once.
GUARD_MOMENT_S = 0.1
GUARD_LINE = re.compile(r"under its ([0-9.]+)-s line")


def listener_refusals(refusals: list[dict], traces: list[dict], shown: int = 3) -> list[str]:
    """Lines of a report: at each moment the listener guard refused, the settled listeners'
    leads from the streams' timelines (delivered audio less what played since the first
    chunk, and the audio of chunks a codec job held then), the `shown` lowest first, and how
    many were under the refusal's line without and with the chunks being decoded. Tokens not
    yet in a chunk are not in a timeline, so a lead here is at most the guard's."""
    guard = [r for r in refusals if r["cause"] == RefusalCause.LISTENERS]
    moments: list[dict] = []
    for refusal in guard:
        if not moments or refusal["arrival"] - moments[-1]["arrival"] > GUARD_MOMENT_S:
            moments.append(refusal)
    if not moments:
        return []
    start = guard[0]["arrival"]
    lines = [f"{len(guard)} refusals by the listener guard, at {len(moments)} moment(s):"]
    for refusal in moments:
        now = refusal["arrival"]
        leads = sorted(lead for t in traces if (lead := _settled_lead(t, now)) is not None)
        match = GUARD_LINE.search(refusal["reason"])
        head = f"+{now - start:6.2f} s  {len(leads)} settled listeners"
        if leads:
            low = ", ".join(f"{d:.2f} (+{f:.2f} decoding)" for d, f in leads[:shown])
            head += f", the lowest {low} s"
        if match:
            line = float(match.group(1))
            under = sum(d < line for d, _ in leads)
            still = sum(d + f < line for d, f in leads)
            head += f"; under the {line:.2f}-s line: {under}, {still} with what was decoding"
        lines.append(head)
    return lines


def _settled_lead(trace: dict, now: float) -> tuple[float, float] | None:
    """A request's listener at `now` (engine clock), if settled and its stream generating:
    (audio delivered and not yet played, audio in codec jobs not yet out), seconds."""
    chunks = [c for c in trace.get("chunks", []) if c.get("out_ms") is not None]
    if not chunks or trace.get("last_token_ms") is None:
        return None
    arrival = trace["arrival"]
    first_out = arrival + chunks[0]["out_ms"] / 1e3
    if now - first_out < SETTLED_AFTER_S or arrival + trace["last_token_ms"] / 1e3 < now:
        return None
    delivered = decoding = 0.0
    for chunk in chunks:
        submitted, out = (arrival + chunk[k] / 1e3 for k in ("submitted_ms", "out_ms"))
        if out <= now:
            delivered += chunk["audio_ms"] / 1e3
        elif submitted <= now:
            decoding += chunk["audio_ms"] / 1e3
    return delivered - (now - first_out), decoding


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
    try:
        refusals = read_refusals(args.trace)
        traces = read_traces(args.trace)
    except (OSError, ValueError, KeyError) as exc:
        ap.exit(2, f"error: cannot read {args.trace} as a request trace file: {exc}\n")
    if not variants:
        judged = [r["outlook"] for r in refusals if r.get("outlook")]
        variants = standard_variants(bool(judged) and all(o.get("turn_line_s") for o in judged))
    print("\n".join(replay(refusals, variants) + listener_refusals(refusals, traces)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
