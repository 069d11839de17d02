"""The results file `bench/results/<date>-<machine>-<model>.json` and its plot (p90 TTFA and
viability against request rate, every system on the same axes)."""

from __future__ import annotations

import datetime
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from voxbench.servers import REPO_ROOT

SCHEMA = "voxgate-bench/1"


def machine_name() -> str:
    """The GPU's name (nvidia-smi, else torch in a child process so this one never holds a
    CUDA context), else the CPU / platform."""
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        if out:
            return out.splitlines()[0].strip()
    probe = "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
    out = _run([sys.executable, "-c", probe])
    if out and out.strip():
        return out.strip()
    return f"cpu {_cpu_model() or platform.processor() or platform.machine()}"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def git_commit(given: str | None = None) -> dict[str, Any]:
    """HEAD of the checkout and whether it has uncommitted changes; `given` (--commit) wins,
    for copies of the tree that travel without their .git."""
    if given:
        return {"commit": given, "dirty": None, "commit_source": "--commit"}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT)
    status = _run(["git", "status", "--porcelain"], cwd=REPO_ROOT)
    dirty = None if status is None else bool(status.strip())
    return {"commit": commit.strip() if commit else None, "dirty": dirty}


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def results_path(out_dir: Path, machine: str, model: str, now: datetime.datetime) -> Path:
    """<date>-<machine>-<model>.json, with -2, -3 … when that name is taken."""
    stem = f"{now:%Y-%m-%d}-{slug(machine)}-{slug(Path(model).name)}"
    path = out_dir / f"{stem}.json"
    n = 2
    while path.exists():
        path = out_dir / f"{stem}-{n}.json"
        n += 1
    return path


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a killed run leaves the previous complete checkpoint, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


# --- the plot -----------------------------------------------------------------------------------
_STYLES = {
    "voxgate-slack": ("tab:blue", "o"),
    "voxgate-fcfs": ("tab:orange", "s"),
    "hf-baseline": ("tab:red", "^"),
    "voxgate": ("tab:blue", "o"),
}


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """p90 TTFA (top) and viability (bottom) against request rate; None without matplotlib.
    Hollow markers: points stopped early (their verdict is certain, their figures bounds)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    slo = results["settings"]["slo"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for name, system in results["systems"].items():
        points = sorted(system.get("points", []), key=lambda p: p["rate"])
        if not points:
            continue
        color, marker = _STYLES.get(name, ("tab:gray", "d"))
        rates = [p["rate"] for p in points]
        p90 = [p["summary"]["ttfa_ms"]["p90"] for p in points]
        viab = [100 * p["summary"]["viability"] for p in points]
        label = f"{name} (goodput {system.get('goodput_req_s', 0):g} req/s)"
        for ax, ys in ((top, p90), (bottom, viab)):
            ax.plot(
                rates, [y if y is not None else float("nan") for y in ys], color=color, label=label
            )
            for r, y, p in zip(rates, ys, points, strict=True):
                if y is not None:
                    ax.scatter(
                        [r],
                        [y],
                        color=color,
                        marker=marker,
                        zorder=3,
                        facecolors="none" if p.get("stopped_early") else color,
                    )
    top.axhline(slo["p90_ttfa_ms"], color="k", linestyle="--", linewidth=1)
    bottom.axhline(100 * slo["viability"], color="k", linestyle="--", linewidth=1)
    top.set_ylabel("p90 TTFA (ms)")
    top.set_yscale("log")
    bottom.set_ylabel(f"viability (%), buffer {results['settings']['initial_buffer_ms']:g} ms")
    bottom.set_ylim(-2, 102)
    bottom.set_xlabel("request rate (req/s, Poisson)")
    bottom.set_xscale("log", base=2)
    rates = sorted({p["rate"] for s in results["systems"].values() for p in s.get("points", [])})
    if rates:
        bottom.set_xticks(rates, [f"{r:g}" for r in rates])
        bottom.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    top.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    top.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    if rates:  # a run that stopped before its first point has nothing to label
        top.legend(fontsize=8, title="hollow: stopped early (partial)", title_fontsize=7)
    commit = (results.get("commit") or "")[:10]
    top.set_title(f"{results['model']} on {results['machine']} · {commit}", fontsize=10)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


# --- the headline figures -----------------------------------------------------------------------
def _at_goodput(system: dict[str, Any]) -> tuple[dict[str, Any] | None, float | None]:
    """The point the headline quotes: at the goodput rate, else the lowest rate run."""
    points = system.get("points") or []
    if not points:
        return None, None
    goodput = system.get("goodput_req_s") or 0.0
    match = [p for p in points if p["rate"] == goodput]
    point = match[0] if match else min(points, key=lambda p: p["rate"])
    return point, point["rate"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def headline(results: dict[str, Any], cfg) -> dict[str, Any]:
    """Top-level keys: the primary system's goodput, TTFA and viability at that rate, RTF; the
    baseline's; their ratios; and every way the run departed from the benchmark method (docs/benchmarking.md)."""
    systems = results["systems"]
    engines = [name for name, s in systems.items() if s["kind"] == "voxgate"]
    primary = systems[engines[0]] if engines else {}  # the first policy, even if it did not run
    baseline = systems.get("hf-baseline", {})
    point, rate = _at_goodput(primary)
    b_point, b_rate = _at_goodput(baseline)
    rtf = (primary.get("throughput") or {}).get("rtf")
    b_rtf = (baseline.get("throughput") or {}).get("rtf")
    goodput = primary.get("goodput_req_s", 0.0) if primary else None
    b_goodput = baseline.get("goodput_req_s", 0.0) if baseline else None
    out: dict[str, Any] = {
        "system": engines[0] if engines else None,
        "goodput_req_s": goodput,
        "baseline_goodput_req_s": b_goodput,
        "ttfa_ms": {k: point["summary"]["ttfa_ms"][k] for k in ("p50", "p90", "p99")}
        if point
        else None,
        "at_rate_req_s": rate,
        "viability": point["summary"]["viability"] if point else None,
        "underrun_ms_total": point["summary"]["underrun_ms_total"] if point else None,
        "rtf": rtf,
        "baseline_rtf": b_rtf,
        "baseline_at_rate": {
            "rate": b_rate,
            "viability": b_point["summary"]["viability"],
            "ttfa_ms": {k: b_point["summary"]["ttfa_ms"][k] for k in ("p50", "p90", "p99")},
        }
        if b_point
        else None,
        "ratios": {"goodput": _ratio(goodput, b_goodput), "rtf": _ratio(rtf, b_rtf)},
    }
    if baseline.get("note"):
        out["baseline_note"] = baseline["note"]
    out["deviations"] = deviations(results, cfg)
    return out


def deviations(results: dict[str, Any], cfg) -> list[str]:
    notes = []
    if cfg.duration_s < 60 or cfg.min_requests < 400:
        notes.append(
            f"rate points ran for max({cfg.duration_s:g} s, {cfg.min_requests} requests), "
            "not max(60 s, 400 requests)"
        )
    if "hf-baseline" in results["systems"]:
        notes.append(
            f"baseline points ran for max({cfg.duration_s:g} s, {cfg.baseline_min_requests} "
            "requests): it serves one request at a time"
        )
    if cfg.min_requests < 100 and cfg.slo.viability >= 0.99:
        notes.append(
            "points under 100 requests pass only with every request viable (99 % of "
            "fewer than 100 rounds up to all)"
        )
    if cfg.max_audio_seconds is not None:
        notes.append(f"workload audio capped at {cfg.max_audio_seconds:g} s per request")
    if cfg.audio_format != "opus" or cfg.frame_ms != 20:
        notes.append(f"output audio {cfg.audio_format}/{cfg.frame_ms} ms instead of opus/20 ms")
    systems = results["systems"]
    stopped = _rates_where(systems, lambda p: p.get("stopped_early"))
    if stopped:
        notes.append(
            f"failing points stopped once they could no longer pass ({stopped}): verdicts "
            "exact, their figures partial"
        )
    saturated = _rates_where(systems, lambda p: p.get("client", {}).get("saturated"))
    if saturated:
        notes.append(f"client event loop lagged (p99 > 20 ms) at {saturated}: add --client-procs")
    cut = [
        n
        for n, s in results["systems"].items()
        if (s.get("search") or {}).get("ended_by") or s.get("skipped")
    ]
    if cut:
        notes.append(f"search cut short (time budget / max points) for {', '.join(cut)}")
    return notes


def _rates_where(systems: dict[str, Any], test) -> str:
    """'voxgate-slack at 16, 32 req/s; hf-baseline at 0.125 req/s' for the points passing test."""
    parts = []
    for name, system in systems.items():
        rates = [p["rate"] for p in system.get("points", []) if test(p)]
        if rates:
            parts.append(f"{name} at {', '.join(f'{r:g}' for r in rates)} req/s")
    return "; ".join(parts)
