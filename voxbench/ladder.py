"""What the ladder modes of `voxgate bench` share: `--capacity` (real-time listeners,
voxbench/capacity.py) and `--conversations` (spoken turn-based conversations,
voxbench/turn_capacity.py).

A ladder runs one point per count N, ascending, on a server per scheduler policy (started here
with `--serve`, or one already running with `--url`). A point **holds** when nothing was
refused or failed, at least `min_on_time` of the frames the clients asked for arrived by their
playback deadline, and the p90 latency is within the bound; the largest N that holds is the
figure. Each point also records the server's side (`ServerProfile`): the engine loop's profile
(voxbench/engine_loop.py), its request traces, and its pauses (GC, event-loop lag, encodes).
The results file is rewritten after every point and plotted at the end.
"""

from __future__ import annotations

import abc
import datetime
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.request_trace import read_traces, read_turns
from engine.request_trace import summarize as summarize_traces
from voxbench import report, servers
from voxbench.admission_view import (
    admission_during,
    describe_admission,
    room_by_second,
    turn_fit_by_second,
)
from voxbench.engine_loop import (
    describe_loop,
    gpu_shares,
    loop_profile,
    steps_by_second,
    turn_fit,
)
from voxbench.late_chunks import describe_late_chunks, late_chunk_timing
from voxbench.loadgen import LoadGenerator
from voxbench.metrics import EPS_MS, distribution, frame_lateness, percentile
from voxbench.metrics_sampler import MetricsSampler
from voxbench.turn_accuracy import accuracy

log = logging.getLogger("voxgate.bench")


@dataclass(frozen=True)
class LadderConfig:
    """The options every ladder mode takes (the modes add their own fields)."""

    counts: tuple[int, ...]  # N clients per point, run in ascending order
    model: str = "tiny-orpheus"
    url: str | None = None  # a running server, or None: start `voxgate serve` here
    random_weights: bool = False
    device: str | None = None
    policies: tuple[str, ...] = ("slack",)
    server_args: tuple[str, ...] = ()
    stagger_s: float = 10.0  # the N clients start evenly over this
    min_on_time: float = 0.999
    p90_ttfa_ms: float = 500.0  # the p90 latency bound (TTFA; reply latency for turns)
    buffer_ms: float = 0.0  # the clients' playback buffer b
    output_audio: tuple[tuple[str, Any], ...] = (
        ("format", "opus"),
        ("sample_rate", 48000),
        ("frame_ms", 20),
    )
    seed: int = 0
    client_procs: int = 1
    drain_timeout_s: float = 60.0
    # Consecutive points that do not hold end the ladder; 0: every point runs (--no-early-stop,
    # for A/B runs that compare builds at each point).
    stop_after_failures: int = 2
    # Points of each N, run one after another on the same server (--repeats): an A/B at the
    # edge, where one run of a count can hold and the next collapse, gets several samples for
    # one server start, and N holds only if each of its points did.
    repeats: int = 1
    settle_s: float = 2.0
    startup_timeout_s: float = 900.0
    api_key: str | None = None
    out_dir: Path = Path("bench/results")
    commit: str | None = None

    def check(self, flag: str, example: str) -> None:
        """Raise ValueError for options no ladder can run with."""
        if not self.counts or min(self.counts) < 1:
            raise ValueError(f"{flag} takes counts >= 1, e.g. {example}")
        if self.stagger_s < 0:
            raise ValueError("--stagger must be >= 0")
        if self.repeats < 1:
            raise ValueError("--repeats must be >= 1")
        if not 0 < self.min_on_time <= 1:
            raise ValueError("--min-on-time must be in (0, 1]")
        if self.url is not None and len(self.policies) > 1:
            raise ValueError("several --policies need --serve (each policy is its own server)")

    def settings(self) -> dict[str, Any]:
        """Every option, as the results file records it (no API key)."""
        data = asdict(self)
        data.pop("api_key")
        data["output_audio"] = dict(self.output_audio)
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}


# --- one point's verdict ----------------------------------------------------------------------
@dataclass
class FrameCount:
    """Frames the clients asked for against those that came by their deadline t0 + b + o."""

    expected: int = 0
    on_time: int = 0
    late_streams: int = 0  # timelines with any late frame
    lateness_ms: list[float] = field(default_factory=list)  # how late each late frame was
    # Late frames by the whole second of the point they arrived in (timelines whose start is
    # known): a ramp's stalls and a steady load's shortfall look different here.
    late_by_second: dict[int, int] = field(default_factory=dict)
    # Which streams fell behind, and when in their own audio: the second of the point each late
    # stream was sent in, and how far into its audio its first late frame was. New streams
    # late just after their first chunk (its cover) and old ones late in a steady shortfall
    # need different cures.
    late_stream_sent_s: list[float] = field(default_factory=list)
    first_late_audio_ms: list[float] = field(default_factory=list)
    # Whether the server kept pace, second by second: audio that arrived in each second of the
    # point, and the stream-seconds of streaming in it (from each stream's first frame to its
    # last). Their ratio is the audio a running stream got a second, in multiples of real
    # time: 1.0 while the server keeps pace, below it as the listeners' buffers drain.
    delivered_s_by_second: dict[int, float] = field(default_factory=dict)
    streaming_s_by_second: dict[int, float] = field(default_factory=dict)

    def add(
        self,
        arrivals_ms: Sequence[float],
        durations_ms: Sequence[float],
        buffer_ms: float,
        ok: bool,
        asked: int,
        sent_s: float | None = None,
    ) -> None:
        """One timeline. A completed one asked for what it got (the codec's whole frames); a
        refused or broken one for `asked` frames, the missing ones counting as not on time.
        `sent_s`: when, in the point's seconds, the times in `arrivals_ms` count from."""
        late = frame_lateness(arrivals_ms, durations_ms, buffer_ms)
        n_late = sum(1 for x in late if x > EPS_MS)
        self.expected += len(late) if ok else max(asked, len(late))
        self.on_time += len(late) - n_late
        self.late_streams += n_late > 0
        self.lateness_ms.extend(x for x in late if x > EPS_MS)
        if n_late:
            first = next(i for i, x in enumerate(late) if x > EPS_MS)
            self.first_late_audio_ms.append(sum(durations_ms[:first]))
            if sent_s is not None:
                self.late_stream_sent_s.append(sent_s)
        if sent_s is not None:
            seconds = self.late_by_second
            for arrival, lateness in zip(arrivals_ms, late, strict=True):
                if lateness > EPS_MS:
                    second = int(sent_s + arrival / 1000)
                    seconds[second] = seconds.get(second, 0) + 1
            self._add_delivery(arrivals_ms, durations_ms, sent_s)

    def _add_delivery(
        self, arrivals_ms: Sequence[float], durations_ms: Sequence[float], sent_s: float
    ) -> None:
        if not arrivals_ms:
            return
        delivered = self.delivered_s_by_second
        for arrival, duration in zip(arrivals_ms, durations_ms, strict=True):
            second = int(sent_s + arrival / 1000)
            delivered[second] = delivered.get(second, 0.0) + duration / 1000
        first, last = sent_s + arrivals_ms[0] / 1000, sent_s + arrivals_ms[-1] / 1000
        streaming = self.streaming_s_by_second
        for second in range(int(first), int(last) + 1):
            overlap = min(last, second + 1) - max(first, second)
            if overlap > 0:
                streaming[second] = streaming.get(second, 0.0) + overlap

    def delivery_by_second(self) -> dict[int, float]:
        """Audio a running stream got in each second of the point, × real time (seconds with
        under a tenth of a stream-second of streaming left out: too few to say)."""
        return {
            second: round(self.delivered_s_by_second.get(second, 0.0) / streaming, 2)
            for second, streaming in sorted(self.streaming_s_by_second.items())
            if streaming >= 0.1
        }

    @property
    def fraction(self) -> float:
        return self.on_time / self.expected if self.expected else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "frames_expected": self.expected,
            "frames_on_time": self.on_time,
            "on_time": round(self.fraction, 5),
            "late_ms": distribution(self.lateness_ms),
            # JSON keys are strings: the second of the point, in order
            "late_by_second": {str(s): n for s, n in sorted(self.late_by_second.items())},
            "delivery_by_second": {str(s): x for s, x in self.delivery_by_second().items()},
            "late_stream_sent_s": distribution(self.late_stream_sent_s),
            "first_late_audio_ms": distribution(self.first_late_audio_ms),
        }


def point_holds(
    refused: int,
    failed: int,
    frames: FrameCount,
    latencies_ms: Sequence[float],
    min_on_time: float,
    p90_bound_ms: float,
) -> bool:
    """The ladder's rule: nothing refused or failed, `min_on_time` of the frames on time and
    the p90 latency within the bound (no latency measured: it does not hold)."""
    p90 = percentile(latencies_ms, 90)
    return (
        refused == 0
        and failed == 0
        and frames.fraction >= min_on_time
        and p90 is not None
        and p90 <= p90_bound_ms
    )


def capacity_of(points: list[dict[str, Any]], key: str = "listeners") -> int:
    """The largest N whose points all held (0: none did). A count run several times
    (--repeats) holds only if every run of it did."""
    failed = {p[key] for p in points if not p["summary"]["holds"]}
    return max((p[key] for p in points if p[key] not in failed), default=0)


# --- the server's side of a point ---------------------------------------------------------------
class ServerProfile:
    """The server's view of one point: its /metrics sampled through it (the engine loop's
    profile, the GPU's shares and the steps' pace and cost by second, real-time admission's
    refusals by cause and its predicted room by second), its pauses and, for a server started
    here, its request traces (and, matched to the clients' records, where its late streams'
    first late chunks lost their time: voxbench/late_chunks.py)."""

    def __init__(self, http: str, trace: Path | None, buffer_ms: float = 0.0) -> None:
        self.http, self.trace = http, trace
        self.buffer_ms = buffer_ms  # the clients' playback buffer (late_chunk_timing's frames)
        self._pauses = servers.server_pauses(http)
        self._sampler = MetricsSampler(http)
        self.began = time.monotonic()
        self.ended = self.began
        self.engine_loop: dict[str, Any] | None = None
        self.admission: dict[str, Any] | None = None

    def load_ended(self) -> None:
        """The clients are done: the point's figures cover the load only."""
        self.ended = time.monotonic()
        readings = self._sampler.stop()
        first, last = readings[0], readings[-1]
        self.engine_loop = loop_profile(first.loop, last.loop, self.wall_s)
        if self.engine_loop is not None:
            sampled = [(r.t, r.loop) for r in readings if r.loop is not None]
            shares = gpu_shares(sampled)
            self.engine_loop["gpu_share_by_second"] = {str(s): v for s, v in shares.items()}
            pages = {r.t: r.kv_pages for r in readings if r.kv_pages is not None}
            steps = steps_by_second(sampled, pages)
            self.engine_loop["steps_by_second"] = {str(s): v for s, v in steps.items()}
            self.engine_loop["turn_fit"] = turn_fit(steps)
        self.admission = admission_during(first.admission, last.admission)
        if self.admission is not None:
            views = [(r.t, r.admission) for r in readings]
            room = room_by_second(views)
            self.admission["room_by_second"] = {str(s): n for s, n in room.items()}
            fits = turn_fit_by_second(views)
            self.admission["turn_fit_by_second"] = {str(s): list(f) for s, f in fits.items()}

    @property
    def wall_s(self) -> float:
        return self.ended - self.began

    def finish(self, point: dict[str, Any]) -> None:
        """After the server has gone idle: the point's `engine_loop`, `admission`,
        `server_pauses` and `engine_trace`."""
        point["engine_loop"] = self.engine_loop
        if self.admission is not None and self.trace is not None and self.trace.exists():
            turns = read_turns(self.trace)
            if turns.turns:  # how well the turn cost model foresaw this point's turns
                self.admission["turn_model_vs_measured"] = accuracy(turns, self.began, self.ended)
        point["admission"] = self.admission
        for line in describe_loop(self.engine_loop) + describe_admission(self.admission):
            log.info("  %s", line)
        servers.wait_idle(self.http)
        pauses = servers.pauses_between(self._pauses, servers.server_pauses(self.http))
        point["server_pauses"] = pauses
        for line in servers.describe_pauses(pauses):
            log.info("  %s", line)
        if self.trace is not None and self.trace.exists():
            traces = read_traces(self.trace, self.began, self.ended)
            point["engine_trace"] = summarize_traces(traces)
            late = late_chunk_timing(point.get("records") or [], traces, self.buffer_ms)
            point["late_chunks"] = late
            for line in describe_late_chunks(late):
                log.info("  %s", line)


def ladder_stops(misses: int, stop_after_failures: int) -> bool:
    """Whether `misses` points in a row that did not hold end the ladder (never with 0)."""
    return 0 < stop_after_failures <= misses


# --- the run ------------------------------------------------------------------------------------
class LadderRun(abc.ABC):
    """A ladder per policy; the modes say how to prepare a server and how to run one point."""

    schema: str  # the results file's schema name
    suffix: str  # the results file's name ends -<suffix>.json
    count_key: str  # what N counts, in each point and the plot ("listeners", "conversations")

    def __init__(self, cfg: LadderConfig, argv: list[str]) -> None:
        self.cfg = cfg
        now = datetime.datetime.now(datetime.UTC)
        machine = report.machine_name()
        self.path = report.results_path(
            Path(cfg.out_dir), machine, f"{cfg.model}-{self.suffix}", now
        )
        self.results: dict[str, Any] = {
            "schema": self.schema,
            "model": cfg.model,
            "machine": machine,
            **report.git_commit(cfg.commit),
            "created_utc": now.isoformat(timespec="seconds"),
            "command": " ".join(argv),
            "settings": cfg.settings(),
            "systems": {},
        }
        self.gen = LoadGenerator(cfg.client_procs)  # the clients' processes, started by run()

    @abc.abstractmethod
    def prepare(self, url: str) -> None:
        """Before a server's ladder: read what it serves, warm it up."""

    @abc.abstractmethod
    def measure(self, url: str, n: int) -> dict[str, Any]:
        """Run one point of N clients: the point's fields, `summary` (with `holds`) among
        them. The server's profile is taken around it."""

    @abc.abstractmethod
    def describe(self, n: int, summary: dict[str, Any]) -> str:
        """The point's log line."""

    def plot(self) -> Path | None:
        return None

    def run(self) -> Path:
        c = self.cfg
        self._save()
        with self.gen:
            for policy in c.policies:
                self._system(policy)
        self._save()  # a system whose server never started is recorded too, with its error
        png = self.plot()
        if png:
            log.info("plot: %s", png)
        return self.path

    def _system(self, policy: str) -> None:
        c = self.cfg
        name = f"voxgate-{policy}" if c.url is None else "voxgate"
        entry: dict[str, Any] = {"policy": policy, "capacity": 0, "points": []}
        self.results["systems"][name] = entry
        server = trace = None
        try:
            if c.url is None:
                server, trace = self._start(name, policy)
        except RuntimeError as exc:
            log.error("%s", exc)
            entry["error"] = str(exc)[-4000:]
            return
        try:
            url = server.url if server else c.url
            assert url is not None
            http = server.http if server else servers.http_base(url)
            if server:
                entry["server"] = {"command": server.command, "startup_s": server.startup_s}
            try:
                self.prepare(url)
            except RuntimeError as exc:  # the server cannot be measured this way: say why
                log.error("%s", exc)
                entry["error"] = str(exc)[-4000:]
                return
            self._ladder(url, http, trace, entry)
        finally:
            if server:
                servers.stop_server(server)
            self._save()

    def token_rate_of(self, started: dict[str, Any], url: str, given: float | None) -> float:
        """`given` (--token-rate), else the rate the server states in `session.started`
        (recorded in the settings): the unit of the requests' min_tokens = max_tokens."""
        if given is not None:
            return given
        rate = started.get("token_rate_hz")
        if not isinstance(rate, int | float) or rate <= 0:
            raise RuntimeError(f"{url} does not state its token rate; pass --token-rate")
        self.results["settings"]["token_rate"] = float(rate)
        return float(rate)

    def _start(self, name: str, policy: str) -> tuple[servers.ServerProcess, Path]:
        c = self.cfg
        port = servers.free_port()
        log_path = self.path.with_name(f"{self.path.stem}.{name}.log")
        trace = log_path.with_suffix(".trace.jsonl")
        trace.unlink(missing_ok=True)
        extra = [*c.server_args, "--trace-requests", str(trace)]
        cmd = servers.serve_command(c.model, c.random_weights, policy, c.device, port, extra)
        return servers.start_server(name, cmd, port, log_path, c.startup_timeout_s), trace

    def _ladder(self, url: str, http: str, trace: Path | None, entry: dict) -> None:
        c = self.cfg
        misses = 0
        runs = [(n, r) for n in sorted(set(c.counts)) for r in range(1, c.repeats + 1)]
        for n, repeat in runs:
            profile = ServerProfile(http, trace, c.buffer_ms)
            point = self.measure(url, n)
            profile.load_ended()
            if c.repeats > 1:
                point["repeat"] = repeat
                log.info("== %d %s, run %d of %d", n, self.count_key, repeat, c.repeats)
            for line in self.describe(n, point["summary"]).splitlines():
                log.info("%s", line)
            profile.finish(point)
            entry["points"].append(point)
            entry["capacity"] = capacity_of(entry["points"], self.count_key)
            self._save()
            misses = 0 if point["summary"]["holds"] else misses + 1
            if ladder_stops(misses, c.stop_after_failures):
                log.info("%d points in a row did not hold: the ladder stops", misses)
                break
            time.sleep(c.settle_s)
        log.info("capacity: %d %s", entry["capacity"], self.count_key)

    def _save(self) -> None:
        report.write_json(self.path, self.results)


# --- the plot -------------------------------------------------------------------------------------
def plot_ladder(
    results: dict[str, Any],
    path: Path,
    count_key: str,
    latency: Callable[[dict[str, Any]], float | None],
    latency_label: str,
    x_label: str,
    title: str,
) -> Path | None:
    """p90 latency (top) and frames on time (bottom) against N; None without matplotlib."""
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
        xs = [p[count_key] for p in points]
        p90 = [latency(p["summary"]) for p in points]
        on_time = [100 * p["summary"]["on_time"] for p in points]
        label = f"{name} (holds {system.get('capacity', 0)})"
        top.plot(xs, _nan(p90), marker="o", label=label)
        bottom.plot(xs, on_time, marker="o", label=label)
    top.axhline(settings["p90_ttfa_ms"], color="k", linestyle="--", linewidth=1)
    bottom.axhline(100 * settings["min_on_time"], color="k", linestyle="--", linewidth=1)
    top.set_ylabel(latency_label)
    bottom.set_ylabel("frames on time (%)")
    bottom.set_xlabel(x_label)
    if any(s.get("points") for s in results["systems"].values()):  # else nothing to name
        top.legend(fontsize=8)
    commit = (results.get("commit") or "")[:10]
    top.set_title(f"{results['model']} {title} on {results['machine']} · {commit}", fontsize=10)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def _nan(values: Iterable[float | None]) -> list[float]:
    return [math.nan if y is None else y for y in values]
