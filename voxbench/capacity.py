"""`voxgate bench --capacity N1,N2,…`: how many real-time streams one server holds at once.

For each N (ascending), N listeners start evenly over `--stagger` seconds, each asking for
`--stream-seconds` of audio over `/v1/stream` (Opus by default), and play from their first
frame with no buffer. A point **holds** when no listener was refused or failed, at least
`--min-on-time` of all frames (99.9 %) arrived by their deadline, and p90 time to first audio
is within the SLO (500 ms). The largest N that holds is the capacity. Each point also records
the server's side: the engine loop's profile (voxbench/engine_loop.py), its request
traces, and its pauses (GC, event-loop lag, encodes). Results go to
`bench/results/<date>-<machine>-<model>-capacity.json` with a plot of N against on-time
frames and TTFA.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.request_trace import read_traces
from engine.request_trace import summarize as summarize_traces
from voxbench import report, servers
from voxbench.engine_loop import describe_loop, loop_profile, read_loop_totals
from voxbench.loadgen import ClientOptions, LoadGenerator, probe_session
from voxbench.metrics import EPS_MS, distribution, frame_lateness, percentile
from voxbench.records import RequestRecord
from voxbench.workload import DEFAULT_WORKLOAD, burst_plan, load_workload, staggered_plan

log = logging.getLogger("voxgate.bench")
SCHEMA = "voxgate-capacity/1"
# What a talking listener sends: Opus packets of 20 ms at 48 kHz (the protocol's default).
MIC_AUDIO = {"format": "opus", "sample_rate": 48000, "frame_ms": 20}


@dataclass(frozen=True)
class CapacityConfig:
    counts: tuple[int, ...]  # N listeners per point, run in ascending order
    model: str = "tiny-orpheus"
    url: str | None = None  # a running server, or None: start `voxgate serve` here
    random_weights: bool = False
    device: str | None = None
    policies: tuple[str, ...] = ("slack",)
    server_args: tuple[str, ...] = ()
    stagger_s: float = 10.0
    stream_s: float = 30.0
    min_on_time: float = 0.999
    p90_ttfa_ms: float = 500.0
    buffer_ms: float = 0.0
    output_audio: tuple[tuple[str, Any], ...] = (
        ("format", "opus"),
        ("sample_rate", 48000),
        ("frame_ms", 20),
    )
    workload: Path = DEFAULT_WORKLOAD
    token_rate: float | None = None
    seed: int = 0
    client_procs: int = 1
    drain_timeout_s: float = 60.0
    stop_after_failures: int = 2  # consecutive points that do not hold end the ladder
    settle_s: float = 2.0
    startup_timeout_s: float = 900.0
    api_key: str | None = None
    out_dir: Path = Path("bench/results")
    commit: str | None = None

    def __post_init__(self) -> None:
        if not self.counts or min(self.counts) < 1:
            raise ValueError("--capacity takes listener counts >= 1, e.g. 48,96,144")
        if self.stagger_s < 0 or self.stream_s <= 0:
            raise ValueError("--stagger must be >= 0 and --stream-seconds > 0")
        if not 0 < self.min_on_time <= 1:
            raise ValueError("--min-on-time must be in (0, 1]")
        if self.url is not None and len(self.policies) > 1:
            raise ValueError("several --policies need --serve (each policy is its own server)")


def microphone_packets(seconds: float = 4.0, seed: int = 0) -> tuple[bytes, ...]:
    """A talking listener's microphone as Opus packets (MIC_AUDIO): a wavering tone in noise,
    encoded once and cycled by every listener (random-weight models answer noise anyway)."""
    from gateway.audio import OpusEncoder
    from gateway.protocol import AudioFormat, AudioSpec

    rate = 24000
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 180 + 40 * np.sin(2 * np.pi * 0.7 * t)
    pcm = 0.2 * np.sin(2 * np.pi * np.cumsum(pitch) / rate) + 0.02 * rng.standard_normal(t.size)
    spec = AudioSpec(
        AudioFormat(MIC_AUDIO["format"]), MIC_AUDIO["sample_rate"], MIC_AUDIO["frame_ms"]
    )
    encoder = OpusEncoder(spec, rate)
    return tuple(encoder.encode(pcm.astype(np.float32)) + encoder.flush())


# --- one point's verdict ----------------------------------------------------------------------
def _refused(record: RequestRecord) -> bool:
    return record.close_code == 1013 or any(e.get("code") == "overloaded" for e in record.errors)


def summarize_capacity(
    records: list[RequestRecord], buffer_ms: float, min_on_time: float, p90_ttfa_ms: float
) -> dict[str, Any]:
    """On-time frames over every frame the listeners asked for (a refused or broken stream's
    missing frames count as not on time), lateness, TTFA, and whether the point holds."""
    expected = on_time = 0
    late_streams = 0
    lateness: list[float] = []
    for r in records:
        frame_ms = r.frame_ms or 20.0
        asked = round(r.audio_seconds * 1000 / frame_ms)
        late = frame_lateness(r.arrivals_ms, r.frame_durations_ms(), buffer_ms)
        n_late = sum(1 for x in late if x > EPS_MS)
        # A completed stream asked for what it got (the codec's whole frames); a refused or
        # broken one for the whole request.
        expected += len(late) if r.ok else max(asked, len(late))
        on_time += len(late) - n_late
        late_streams += n_late > 0
        lateness += [x for x in late if x > EPS_MS]
    ttfa = [r.ttfa_ms for r in records if r.ttfa_ms is not None]
    refused = sum(_refused(r) for r in records)
    failed = sum(1 for r in records if not r.ok and not _refused(r))
    fraction = on_time / expected if expected else 0.0
    p90 = percentile(ttfa, 90)
    return {
        "listeners": len(records),
        "refused": refused,
        "failed": failed,
        "frames_expected": expected,
        "frames_on_time": on_time,
        "on_time": round(fraction, 5),
        "late_streams": late_streams,
        "late_ms": distribution(lateness),
        "ttfa_ms": distribution(ttfa),
        "holds": refused == 0
        and failed == 0
        and fraction >= min_on_time
        and p90 is not None
        and p90 <= p90_ttfa_ms,
    }


def capacity_of(points: list[dict[str, Any]]) -> int:
    """The largest N whose point held (0: none did)."""
    return max((p["listeners"] for p in points if p["summary"]["holds"]), default=0)


# --- the run ------------------------------------------------------------------------------------
class CapacityRun:
    def __init__(self, cfg: CapacityConfig, argv: list[str]) -> None:
        self.cfg = cfg
        self.items = load_workload(cfg.workload)
        now = datetime.datetime.now(datetime.UTC)
        machine = report.machine_name()
        base = report.results_path(Path(cfg.out_dir), machine, f"{cfg.model}-capacity", now)
        self.path = base
        self.token_rate = cfg.token_rate
        self.mic_packets: tuple[bytes, ...] = ()  # set for full-duplex models
        self.results: dict[str, Any] = {
            "schema": SCHEMA,
            "model": cfg.model,
            "machine": machine,
            **report.git_commit(cfg.commit),
            "created_utc": now.isoformat(timespec="seconds"),
            "command": " ".join(argv),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in _settings(cfg)},
            "systems": {},
        }

    def run(self) -> Path:
        c = self.cfg
        self._save()
        with LoadGenerator(c.client_procs) as gen:
            for policy in c.policies:
                name = f"voxgate-{policy}" if c.url is None else "voxgate"
                entry: dict[str, Any] = {"policy": policy, "capacity": 0, "points": []}
                self.results["systems"][name] = entry
                server = None
                try:
                    server, trace = self._start(name, policy) if c.url is None else (None, None)
                except RuntimeError as exc:
                    log.error("%s", exc)
                    entry["error"] = str(exc)[-4000:]
                    continue
                try:
                    url = server.url if server else c.url
                    http = server.http if server else servers.http_base(url)
                    if server:
                        entry["server"] = {"command": server.command, "startup_s": server.startup_s}
                    self._resolve_token_rate(url)
                    self._warm_up(gen, url)
                    self._ladder(gen, url, http, trace, entry)
                finally:
                    if server:
                        servers.stop_server(server)
                    self._save()
        png = plot_capacity(self.results, self.path)
        if png:
            log.info("plot: %s", png)
        return self.path

    def _start(self, name: str, policy: str) -> tuple[servers.ServerProcess, Path]:
        c = self.cfg
        port = servers.free_port()
        log_path = self.path.with_name(f"{self.path.stem}.{name}.log")
        trace = log_path.with_suffix(".trace.jsonl")
        trace.unlink(missing_ok=True)
        extra = [*c.server_args, "--trace-requests", str(trace)]
        cmd = servers.serve_command(c.model, c.random_weights, policy, c.device, port, extra)
        return servers.start_server(name, cmd, port, log_path, c.startup_timeout_s), trace

    def _options(self, url: str, drain_timeout_s: float | None = None) -> ClientOptions:
        c = self.cfg
        return ClientOptions(
            url,
            dict(c.output_audio),
            c.buffer_ms,
            api_key=c.api_key,
            drain_timeout_s=drain_timeout_s or c.drain_timeout_s,
            input_audio=dict(MIC_AUDIO) if self.mic_packets else None,
            mic_packets=self.mic_packets,
            mic_frame_ms=MIC_AUDIO["frame_ms"],
        )

    def _resolve_token_rate(self, url: str) -> None:
        """The served model's token rate (its requests' lengths) and kind: a full-duplex model
        (Moshi) is measured with listeners that talk (Opus microphone packets) instead of text."""
        started = probe_session(self._options(url))
        if started.get("model_kind") == "full_duplex" and not self.mic_packets:
            self.mic_packets = microphone_packets()
            self.results["settings"]["listeners_talk"] = True
        if self.token_rate is None:
            rate = started.get("token_rate_hz")
            if not isinstance(rate, int | float) or rate <= 0:
                raise RuntimeError(f"{url} does not state its token rate; pass --token-rate")
            self.token_rate = float(rate)
            self.results["settings"]["token_rate"] = self.token_rate

    def _warm_up(self, gen: LoadGenerator, url: str) -> None:
        plan = burst_plan(self.items, 2, self.token_rate, -1)
        plan = [
            dataclasses.replace(p, item=dataclasses.replace(p.item, audio_seconds=1.0))
            for p in plan
        ]
        gen.run(plan, self._options(url, drain_timeout_s=300.0))

    def _ladder(self, gen, url: str, http: str, trace: Path | None, entry: dict) -> None:
        c = self.cfg
        misses = 0
        for n in sorted(set(c.counts)):
            point = self._point(gen, url, http, trace, n)
            entry["points"].append(point)
            entry["capacity"] = capacity_of(entry["points"])
            self._save()
            misses = 0 if point["summary"]["holds"] else misses + 1
            if misses >= c.stop_after_failures:
                log.info("%d points in a row did not hold: the ladder stops", misses)
                break
            time.sleep(c.settle_s)
        log.info("capacity: %d listeners", entry["capacity"])

    def _point(self, gen, url: str, http: str, trace: Path | None, n: int) -> dict[str, Any]:
        c = self.cfg
        plan = staggered_plan(self.items, n, c.stagger_s, c.stream_s, self.token_rate, c.seed)
        pauses_before = servers.server_pauses(http)
        loop_before = read_loop_totals(http)
        began = time.monotonic()
        outcome = gen.run(plan, self._options(url))
        ended = time.monotonic()
        loop_after = read_loop_totals(http)
        summary = summarize_capacity(outcome.records, c.buffer_ms, c.min_on_time, c.p90_ttfa_ms)
        point: dict[str, Any] = {
            "listeners": n,
            "summary": summary,
            "wall_s": outcome.wall_s,
            "drain_timeouts": outcome.drain_timeouts,
            "client": outcome.client,
            "engine_loop": loop_profile(loop_before, loop_after, ended - began),
            "records": [r.to_json() for r in outcome.records],
        }
        s = summary
        log.info(
            "%d listeners: %.2f%% of frames on time, %d late streams (late by up to %s ms), "
            "p90 TTFA %s ms, %d refused, %d failed: %s",
            n,
            100 * s["on_time"],
            s["late_streams"],
            s["late_ms"]["max"],
            s["ttfa_ms"]["p90"],
            s["refused"],
            s["failed"],
            "HOLDS" if s["holds"] else "does not hold",
        )
        for line in describe_loop(point["engine_loop"]):
            log.info("  %s", line)
        servers.wait_idle(http)
        pauses = servers.pauses_between(pauses_before, servers.server_pauses(http))
        point["server_pauses"] = pauses
        for line in servers.describe_pauses(pauses):
            log.info("  %s", line)
        if trace is not None and trace.exists():
            point["engine_trace"] = summarize_traces(read_traces(trace, began, ended))
        return point

    def _save(self) -> None:
        report.write_json(self.path, self.results)


def _settings(cfg: CapacityConfig) -> list[tuple[str, Any]]:
    data = asdict(cfg)
    data.pop("api_key")
    data["output_audio"] = dict(cfg.output_audio)
    return list(data.items())


# --- the plot -------------------------------------------------------------------------------------
def plot_capacity(results: dict[str, Any], path: Path) -> Path | None:
    """p90 TTFA (top) and frames on time (bottom) against listeners; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    settings = results["settings"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for name, system in results["systems"].items():
        points = system.get("points", [])
        if not points:
            continue
        xs = [p["listeners"] for p in points]
        p90 = [p["summary"]["ttfa_ms"]["p90"] for p in points]
        on_time = [100 * p["summary"]["on_time"] for p in points]
        label = f"{name} (holds {system.get('capacity', 0)})"
        top.plot(xs, [math.nan if y is None else y for y in p90], marker="o", label=label)
        bottom.plot(xs, on_time, marker="o", label=label)
    top.axhline(settings["p90_ttfa_ms"], color="k", linestyle="--", linewidth=1)
    bottom.axhline(100 * settings["min_on_time"], color="k", linestyle="--", linewidth=1)
    top.set_ylabel("p90 TTFA (ms)")
    bottom.set_ylabel("frames on time (%)")
    bottom.set_xlabel(
        f"listeners (staggered over {settings['stagger_s']:g} s, "
        f"{settings['stream_s']:g} s of audio each)"
    )
    top.legend(fontsize=8)
    commit = (results.get("commit") or "")[:10]
    top.set_title(f"{results['model']} capacity on {results['machine']} · {commit}", fontsize=10)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png
