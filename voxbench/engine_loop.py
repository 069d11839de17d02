"""Where the served engine's time went during a bench point, from its /metrics.

The engine keeps cumulative loop counters (`EngineStats.totals`, exported as
`voxgate_engine_*_total`, gateway/metrics.py LOOP_TOTALS). Two readings around a point give
its profile: how busy the loop was, how long an LLM step took and how many rows it carried,
how often steps ran into `max_num_seqs`, and what the codec's jobs cost — the split between
the step and the socket that client-side figures alone cannot show.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gateway.metrics import LOOP_TOTALS
from voxbench.servers import metrics_body


def read_loop_totals(http: str) -> dict[str, float] | None:
    """The engine's loop counters now (field → value); None when the server does not answer
    or has no engine counters."""
    body = metrics_body(http)
    return None if body is None else parse_loop_totals(body)


# Counters of the loop's time between its turns, which builds before them lack (a bench
# comparing builds reads those without them): absent, not zero, where a server has none.
BETWEEN_TURNS = ("commands_s", "admission_s", "stats_s")


def parse_loop_totals(body: str) -> dict[str, float] | None:
    fields = {f"{name}_total": attr for name, (_, attr) in LOOP_TOTALS.items()}
    found: dict[str, float] = {}
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name in fields:
            found[fields[name]] = float(value)
    missing = set(fields.values()) - set(found)
    return found if missing <= set(BETWEEN_TURNS) else None


def gpu_shares(samples: list[tuple[float, dict[str, float]]]) -> dict[int, int]:
    """(seconds into the point, loop totals) readings (voxbench/metrics_sampler.py) → the
    LLM's and the codec's (lane included) share of each interval between them in percent,
    keyed by the second the interval began in."""
    shares: dict[int, int] = {}
    for (t0, a), (t1, b) in zip(samples, samples[1:], strict=False):
        if t1 > t0:
            busy = _gpu_busy_s({k: b[k] - a[k] for k in _GPU_BUSY})
            shares[int(t0)] = round(100 * busy / (t1 - t0))
    return shares


# The loop totals that are the GPU's time: the LLM's steps and the codec's jobs (steady and
# lane), as wall time on their own CUDA streams. They overlap (second by second their sum runs
# past 100 % in a loaded ramp), so the sum is a share of wall time, not of the GPU's SMs.
_GPU_BUSY = ("llm_s", "codec_s", "lane_s")


def steps_by_second(
    samples: list[tuple[float, dict[str, float]]], kv_pages: dict[float, float] | None = None
) -> dict[int, dict[str, float]]:
    """(seconds into the point, loop totals) readings → each sampled interval's LLM steps a
    second, their mean time and rows, the loop turn's mean time and, where `kv_pages` (reading
    time → KV pages in use) has the interval's end, the pages then: how the step grew as the
    streams' contexts did (every running stream's pages are read by every decode step), keyed
    by the second the interval began in. Intervals without a step are left out."""
    out: dict[int, dict[str, float]] = {}
    for (t0, a), (t1, b) in zip(samples, samples[1:], strict=False):
        d = {k: b[k] - a[k] for k in ("llm_steps", "llm_s", "loop_turns", "loop_s", "rows")}
        if t1 <= t0 or d["llm_steps"] <= 0:
            continue
        second = {
            "steps_per_s": round(d["llm_steps"] / (t1 - t0), 1),
            "step_ms": round(1e3 * d["llm_s"] / d["llm_steps"], 2),
            "turn_ms": round(1e3 * d["loop_s"] / d["loop_turns"], 2) if d["loop_turns"] else 0.0,
            "rows": round(d["rows"] / d["llm_steps"], 1),
        }
        if all(k in a and k in b for k in BETWEEN_TURNS):  # the loop's time outside its turns
            # A turn's time lands in the reading after its end: a short interval may hold
            # more than its length of turns.
            second["outside_pct"] = max(0, round(100 * (1 - d["loop_s"] / (t1 - t0))))
            for key in BETWEEN_TURNS:
                second[f"{key[:-2]}_pct"] = round(100 * (b[key] - a[key]) / (t1 - t0))
        if b.get("frames_out", 0) > a.get("frames_out", 0):  # full duplex: which went late
            for key in ("frames_late", "input_late", "gc_full"):
                second[key] = int(b[key] - a[key])
        if kv_pages is not None and t1 in kv_pages:
            second["kv_pages"] = kv_pages[t1]
        out[int(t0)] = second
    return out


# A second enters the turn's fit with at least this many LLM steps (the ramp's first and the
# drain's last seconds carry a few, and their turns say more about idling than cost), and the
# fit needs this many such seconds.
FIT_MIN_STEPS_PER_S = 20.0
FIT_MIN_SECONDS = 8


def turn_fit(steps: dict[int, dict[str, float]]) -> dict[str, float] | None:
    """The loop turn as a line in rows and KV pages in use, least squares over the point's
    loaded seconds (`steps_by_second`): fixed ms + ms a row + µs a page, its rms error, and
    the rms error of a line in rows alone (real-time admission's model of the turn) beside
    it. Every decode step reads every running stream's pages, so where contexts grow through
    a point the turn follows its pages, not its rows (Orpheus on the H200: rms 0.43 ms against
    1.51). None without enough loaded seconds with pages read, or when rows and pages never
    varied apart."""
    points = [
        (v["rows"], v["kv_pages"], v["turn_ms"])
        for v in steps.values()
        if "kv_pages" in v and v["steps_per_s"] >= FIT_MIN_STEPS_PER_S
    ]
    if len(points) < FIT_MIN_SECONDS:
        return None
    rows, pages, turn = (np.array(column, dtype=float) for column in zip(*points, strict=True))
    both = np.column_stack([np.ones_like(rows), rows, pages])
    if np.linalg.matrix_rank(both) < 3:
        return None
    coef = np.linalg.lstsq(both, turn, rcond=None)[0]
    by_rows = np.linalg.lstsq(both[:, :2], turn, rcond=None)[0]
    return {
        "seconds": len(points),
        "fixed_ms": round(float(coef[0]), 3),
        "per_row_ms": round(float(coef[1]), 4),
        "per_page_us": round(1e3 * float(coef[2]), 3),
        "rms_ms": round(_rms(both @ coef - turn), 2),
        "rows_only_rms_ms": round(_rms(both[:, :2] @ by_rows - turn), 2),
    }


def _rms(errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(errors**2)))


def _gpu_busy_s(delta: dict[str, float]) -> float:
    return sum(delta[k] for k in _GPU_BUSY)


def _per(total: float, count: float, scale: float = 1.0) -> float | None:
    return round(scale * total / count, 2) if count else None


def loop_profile(
    before: dict[str, float] | None, after: dict[str, float] | None, wall_s: float
) -> dict[str, Any] | None:
    """The point's engine profile from two readings `wall_s` seconds apart."""
    if before is None or after is None or wall_s <= 0:
        return None
    d = {k: after[k] - before[k] for k in after if k in before}
    return {
        "wall_s": round(wall_s, 2),
        "loop_busy": round(d["loop_s"] / wall_s, 3),  # the rest: idle, commands, event sends
        "llm_busy": round(d["llm_s"] / wall_s, 3),
        "llm_steps_per_s": round(d["llm_steps"] / wall_s, 1),
        "llm_step_ms": _per(d["llm_s"], d["llm_steps"], 1e3),
        "loop_turn_ms": _per(d["loop_s"], d["loop_turns"], 1e3),
        "rows_per_step": _per(d["rows"], d["llm_steps"]),
        "tokens_per_s": round(d["tokens"] / wall_s, 1),
        "prefill_steps": int(d["prefill_steps"]),
        "prefill_graphed": int(d["prefill_graphed"]),
        "prefill_turn_ms": _per(d["prefill_turn_s"], d["prefill_steps"], 1e3),
        "capped_steps": int(d["capped_steps"]),
        "lead_held_per_step": _per(d["lead_held_rows"], d["llm_steps"]),
        "codec_held_per_step": _per(d["codec_held_rows"], d["llm_steps"]),
        "codec_jobs": int(d["codec_jobs"]),
        "codec_job_ms": _per(d["codec_s"], d["codec_jobs"], 1e3),
        "codec_rows_per_job": _per(d["codec_rows"], d["codec_jobs"]),
        "codec_busy": round(d["codec_s"] / wall_s, 3),
        "codec_early_rows": int(d.get("early_rows", 0)),
        "lane_jobs": int(d["lane_jobs"]),
        "lane_job_ms": _per(d["lane_s"], d["lane_jobs"], 1e3),
        "audio_x_realtime": round(d["audio_s"] / wall_s, 2),
        "gpu_share": round(_gpu_busy_s(d) / wall_s, 3),  # the LLM's and the codec's, added
        "gc_full": int(d["gc_full"]),
        "gc_full_ms": round(1e3 * d["gc_full_s"], 1),
        # The loop's time between turns: commands (of them, admission's verdicts) and stats.
        **{f"{k[:-2]}_busy": round(d[k] / wall_s, 3) for k in BETWEEN_TURNS if k in d},
        "duplex": ({k: int(d[k]) for k in _DUPLEX_FRAMES} if d["frames_out"] > 0 else None),
    }


# Full-duplex frame accounting (LoopTotals): what the engine stepped, and which went late why.
_DUPLEX_FRAMES = ("frames_out", "frames_late", "input_late", "input_dropped", "resyncs")


def describe_loop(profile: dict[str, Any] | None) -> list[str]:
    """The profile as log lines."""
    if not profile:
        return []
    p = profile
    lines = [
        f"engine loop: busy {100 * p['loop_busy']:.0f} % (LLM {100 * p['llm_busy']:.0f} %), "
        f"{p['llm_steps_per_s']} LLM steps/s of {p['llm_step_ms']} ms and "
        f"{p['rows_per_step']} rows, turn {p['loop_turn_ms']} ms, "
        f"{p['prefill_steps']} with prefill ({p['prefill_graphed']} from graphs, "
        f"turn {p['prefill_turn_ms']} ms), "
        f"{p['capped_steps']} capped at max_num_seqs"
        + f", rows held out a step: {p.get('lead_held_per_step')} by the lead cap, "
        f"{p.get('codec_held_per_step')} by the codec's backlog"
        + (
            f", {p['gc_full']} full GCs of its process ({p['gc_full_ms']:g} ms)"
            if "gc_full" in p
            else ""
        ),
        f"engine codec: {p['codec_jobs']} jobs of {p['codec_job_ms']} ms and "
        f"{p['codec_rows_per_job']} rows (busy {100 * p['codec_busy']:.0f} %; "
        f"{p.get('codec_early_rows', 0)} rows sent early, short of a chunk), "
        f"{p['lane_jobs']} lane jobs of {p['lane_job_ms']} ms; audio out "
        f"{p['audio_x_realtime']}x real time; LLM + codec {100 * p['gpu_share']:.0f} % of the "
        "point",
    ]
    if p.get("gpu_share_by_second"):
        lines.append(
            "LLM + codec by second of the point (%): "
            + " ".join(f"{s}s:{v}" for s, v in p["gpu_share_by_second"].items())
        )
    between = {s: v for s, v in (p.get("steps_by_second") or {}).items() if "outside_pct" in v}
    if "commands_busy" in p:
        lines.append(
            f"engine loop between its turns: commands {100 * p['commands_busy']:.1f} % of the "
            f"point (admission's verdicts {100 * p['admission_busy']:.1f} %), stats "
            f"{100 * p['stats_busy']:.1f} %; by second (% outside turns|commands|admission|"
            "stats): "
            + " ".join(
                f"{s}s:{v['outside_pct']}|{v['commands_pct']}|{v['admission_pct']}|{v['stats_pct']}"
                for s, v in between.items()
            )
        )
    if p.get("steps_by_second"):
        lines.append(
            "LLM steps by second of the point (steps/s|step ms|turn ms|rows|KV pages): "
            + " ".join(
                f"{s}s:{v['steps_per_s']:g}|{v['step_ms']:g}|{v['turn_ms']:g}|{v['rows']:g}"
                f"|{v.get('kv_pages', '-')}"
                for s, v in p["steps_by_second"].items()
            )
        )
    if p.get("duplex"):
        f = p["duplex"]
        lines.append(
            f"engine frames: {f['frames_out']} stepped, {f['frames_late']} finished after they "
            f"were due, {f['input_late']} on silence (the user's audio not there yet), "
            f"{f['input_dropped']} input frames dropped, {f['resyncs']} resyncs"
        )
    if p.get("duplex") and p.get("steps_by_second"):
        lines.append(
            "engine frames by second of the point (late|on silence|full GCs): "
            + " ".join(
                f"{s}s:{v['frames_late']}|{v['input_late']}|{v['gc_full']}"
                for s, v in p["steps_by_second"].items()
                if "frames_late" in v
            )
        )
    fit = p.get("turn_fit")
    if fit:
        lines.append(
            f"turn by rows and KV pages ({fit['seconds']} loaded seconds, least squares): "
            f"{fit['fixed_ms']:g} ms + {fit['per_row_ms']:g} ms/row + {fit['per_page_us']:g} "
            f"us/page, rms {fit['rms_ms']:g} ms (a line in rows alone: rms "
            f"{fit['rows_only_rms_ms']:g} ms)"
        )
    return lines
