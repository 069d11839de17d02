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
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voxbench.ladder import (
    FrameCount,
    LadderConfig,
    LadderRun,
    capacity_of,
    plot_ladder,
    point_holds,
)
from voxbench.loadgen import ClientOptions, probe_session
from voxbench.metrics import distribution
from voxbench.records import RequestRecord
from voxbench.workload import (
    DEFAULT_WORKLOAD,
    PlannedRequest,
    WorkItem,
    burst_plan,
    load_workload,
    staggered_plan,
)

log = logging.getLogger("voxgate.bench")
SCHEMA = "voxgate-capacity/1"
# What a talking listener sends: Opus packets of 20 ms at 48 kHz (the protocol's default).
MIC_AUDIO = {"format": "opus", "sample_rate": 48000, "frame_ms": 20}
__all__ = ["MIC_AUDIO", "SCHEMA", "CapacityConfig", "CapacityRun", "capacity_of"]


WARM_UP_AUDIO_S = 1.0  # each of the warm-up's two requests


def warm_up_plan(items: list[WorkItem], token_rate: float) -> list[PlannedRequest]:
    """The two short requests that warm a server up before the first point: items capped at
    WARM_UP_AUDIO_S of audio before their tokens are counted (a random-weights model makes
    exactly that many)."""
    short = [
        dataclasses.replace(item, audio_seconds=min(item.audio_seconds, WARM_UP_AUDIO_S))
        for item in items
    ]
    return burst_plan(short, 2, token_rate, -1)


@dataclass(frozen=True)
class CapacityConfig(LadderConfig):
    stream_s: float = 30.0  # the audio each listener asks for
    workload: Path = DEFAULT_WORKLOAD
    token_rate: float | None = None

    def __post_init__(self) -> None:
        self.check("--capacity", "48,96,144")
        if self.stream_s <= 0:
            raise ValueError("--stream-seconds must be > 0")
        if self.drain_timeout_s < self.stream_s:
            # The wait counts from the last listener's start: a shorter one ends each point
            # before that listener's stream can have played, and counts its frames as lost.
            raise ValueError(
                f"--drain-timeout {self.drain_timeout_s:g} s is shorter than the "
                f"{self.stream_s:g} s each listener streams: a point would end before its last "
                f"listeners could finish; give --drain-timeout {self.stream_s:g} or more"
            )


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
    frames = FrameCount()
    for r in records:
        asked = round(r.audio_seconds * 1000 / (r.frame_ms or 20.0))
        frames.add(r.arrivals_ms, r.frame_durations_ms(), buffer_ms, r.ok, asked, r.sent_s)
    ttfa = [r.ttfa_ms for r in records if r.ttfa_ms is not None]
    refused = sum(_refused(r) for r in records)
    failed = sum(1 for r in records if not r.ok and not _refused(r))
    counted = frames.summary()
    return {
        "listeners": len(records),
        "refused": refused,
        "failed": failed,
        **{k: counted[k] for k in ("frames_expected", "frames_on_time", "on_time")},
        "late_by_second": counted["late_by_second"],
        "delivery_by_second": counted["delivery_by_second"],
        "late_stream_sent_s": counted["late_stream_sent_s"],
        "first_late_audio_ms": counted["first_late_audio_ms"],
        "late_streams": frames.late_streams,
        "late_ms": counted["late_ms"],
        "ttfa_ms": distribution(ttfa),
        "holds": point_holds(refused, failed, frames, ttfa, min_on_time, p90_ttfa_ms),
    }


def describe_late_streams(summary: dict[str, Any]) -> str:
    """Which streams were late and where in their audio, as a log line ("" when none was)."""
    sent, at = summary.get("late_stream_sent_s") or {}, summary.get("first_late_audio_ms") or {}
    if not at.get("n"):
        return ""
    line = "\n  late streams: first late frame at "
    line += f"{at['p50']} ms of their audio (p50; p90 {at['p90']}, max {at['max']})"
    if sent.get("n"):
        line += f", sent at {sent['p50']} s of the point (p50; p90 {sent['p90']})"
    return line


# --- the run ------------------------------------------------------------------------------------
class CapacityRun(LadderRun):
    schema, suffix, count_key = SCHEMA, "capacity", "listeners"

    def __init__(self, cfg: CapacityConfig, argv: list[str]) -> None:
        super().__init__(cfg, argv)
        self.cfg: CapacityConfig = cfg
        self.items = load_workload(cfg.workload)
        self.token_rate = cfg.token_rate
        self.mic_packets: tuple[bytes, ...] = ()  # set for full-duplex models

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

    def prepare(self, url: str) -> None:
        """The served model's token rate (its requests' lengths) and kind: a full-duplex model
        (Moshi) is measured with listeners that talk (Opus microphone packets) instead of text.
        Then two short requests warm the server up."""
        started = probe_session(self._options(url))
        if started.get("model_kind") == "full_duplex" and not self.mic_packets:
            self.mic_packets = microphone_packets()
            self.results["settings"]["listeners_talk"] = True
        self.token_rate = self.token_rate_of(started, url, self.token_rate)
        self.gen.run(
            warm_up_plan(self.items, self.token_rate), self._options(url, drain_timeout_s=300.0)
        )

    def measure(self, url: str, n: int) -> dict[str, Any]:
        c = self.cfg
        assert self.token_rate is not None
        plan = staggered_plan(self.items, n, c.stagger_s, c.stream_s, self.token_rate, c.seed)
        outcome = self.gen.run(plan, self._options(url))
        summary = summarize_capacity(outcome.records, c.buffer_ms, c.min_on_time, c.p90_ttfa_ms)
        return {
            "listeners": n,
            "summary": summary,
            "wall_s": outcome.wall_s,
            "drain_timeouts": outcome.drain_timeouts,
            "client": outcome.client,
            "records": [r.to_json() for r in outcome.records],
        }

    def describe(self, n: int, summary: dict[str, Any]) -> str:
        s = summary
        line = (
            f"{n} listeners: {100 * s['on_time']:.2f}% of frames on time, {s['late_streams']} "
            f"late streams (late by up to {s['late_ms']['max']} ms), p90 TTFA "
            f"{s['ttfa_ms']['p90']} ms, {s['refused']} refused, {s['failed']} failed: "
            + ("HOLDS" if s["holds"] else "does not hold")
        )
        by_second = s.get("late_by_second") or {}
        if by_second:
            seconds = " ".join(f"{sec}s:{count}" for sec, count in by_second.items())
            line += f"\n  late frames by second of the point: {seconds}"
        delivery = s.get("delivery_by_second") or {}
        if by_second and delivery:  # where frames were late: did the server fall behind?
            rates = " ".join(f"{sec}s:{x:.2f}" for sec, x in delivery.items())
            line += f"\n  audio a running stream got by second (x real time): {rates}"
        line += describe_late_streams(s)
        return line

    def plot(self) -> Path | None:
        return plot_capacity(self.results, self.path)


def plot_capacity(results: dict[str, Any], path: Path) -> Path | None:
    """p90 TTFA (top) and frames on time (bottom) against listeners; None without matplotlib."""
    settings = results["settings"]
    return plot_ladder(
        results,
        path,
        "listeners",
        lambda summary: summary["ttfa_ms"]["p90"],
        "p90 TTFA (ms)",
        f"listeners (staggered over {settings['stagger_s']:g} s, "
        f"{settings['stream_s']:g} s of audio each)",
        "capacity",
    )
