"""`voxgate bench` settings, typed and validated before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from voxbench.goodput import SearchSettings
from voxbench.metrics import Slo
from voxbench.workload import DEFAULT_WORKLOAD

POLICIES = ("slack", "fcfs")


class RatePlan(NamedTuple):
    settings: SearchSettings
    note: str | None = None  # why this system's rates are not the plain search
    early_stop: bool = True  # False: the points are measurements to report, not a search


FORMATS = ("opus", "pcm16")


@dataclass(frozen=True)
class BenchConfig:
    url: str | None = None  # a running system under test …
    serve: bool = False  # … or start it (and the baseline) here
    baseline: bool = False
    baseline_url: str | None = None
    model: str = "tiny-orpheus"
    random_weights: bool = False
    device: str | None = None
    policies: tuple[str, ...] = ("slack",)
    server_args: tuple[str, ...] = ()
    rates: tuple[float, ...] = ()
    baseline_rates: tuple[float, ...] = ()
    start_rate: float = 1.0
    baseline_start_rate: float = 0.125
    max_rate: float = 128.0
    bisect_steps: int = 2
    max_points: int = 10
    duration_s: float = 60.0
    min_requests: int = 400
    # The baseline serves one request at a time, so its rates are ~0.1 req/s: 400 requests
    # there would take an hour per point.
    baseline_min_requests: int = 8
    drain_timeout_s: float = 60.0
    initial_buffer_ms: float = 0.0
    slo: Slo = field(default_factory=Slo)
    audio_format: str = "opus"
    frame_ms: int = 20
    sample_rate: int | None = None
    throughput: int = 0
    baseline_throughput: int = 4
    workload: Path = DEFAULT_WORKLOAD
    max_audio_seconds: float | None = None
    # Model tokens per audio second, for min_tokens = max_tokens; None: the served model's own
    # (session.started's token_rate_hz, asked of each system before its load).
    token_rate: float | None = None
    seed: int = 0
    client_procs: int = 1
    warmup: int = 2
    early_stop: bool = True
    settle_s: float = 1.0
    startup_timeout_s: float = 900.0
    time_budget_s: float | None = None
    # With a time budget: kept back for every system still to run (and for the engine's
    # throughput run, which follows its search).
    reserve_s: float = 120.0
    api_key: str | None = None
    out_dir: Path = Path("bench/results")
    commit: str | None = None  # recorded as the commit when the checkout has no .git

    def __post_init__(self) -> None:
        if (self.url is None) == (not self.serve):
            raise ValueError("give either --url of a running server or --serve")
        if self.baseline and not self.serve:
            raise ValueError(
                "--baseline starts the baseline server, so it needs --serve "
                "(with --url, give --baseline-url)"
            )
        if not self.policies or any(p not in POLICIES for p in self.policies):
            raise ValueError(f"policies must be among {POLICIES}, got {self.policies}")
        if self.audio_format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.audio_format!r}")
        for name in ("duration_s", "drain_timeout_s", "start_rate", "baseline_start_rate"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.token_rate is not None and self.token_rate <= 0:
            raise ValueError("token_rate must be > 0")
        if (
            min(self.min_requests, self.baseline_min_requests, self.client_procs) < 1
            or self.initial_buffer_ms < 0
        ):
            raise ValueError("min requests and client processes must be >= 1, the buffer >= 0")

    @property
    def output_audio(self) -> dict[str, Any]:
        rate = self.sample_rate or (48000 if self.audio_format == "opus" else 24000)
        return {"format": self.audio_format, "sample_rate": rate, "frame_ms": self.frame_ms}

    def search_settings(
        self, kind: str, rtf: float | None = None, ablation_rates: tuple[float, ...] = ()
    ) -> RatePlan:
        """How one system's rates are chosen, and a note when that is not the plain search.

        - a policy after the first: the rates the first one ran at, no search of its own (the
          ablation's curves then share x values);
        - the baseline, when its throughput RTF is below 1: it cannot stream even one request
          in real time, so only its lowest rate runs, to the end (the method: report its RTF
          and its viability there);
        - otherwise doubling / the explicit rates, then bisection.
        """
        if kind == "voxgate":
            if ablation_rates:
                rates = tuple(sorted(ablation_rates))
                note = "ablation: run at the first policy's rates (no search of its own)"
                top = max(self.max_rate, rates[-1])
                return RatePlan(SearchSettings(rates, rates[0], top, rates[0], 0, len(rates)), note)
            low = min(self.start_rate, self.baseline_start_rate)
            return RatePlan(
                SearchSettings(
                    self.rates,
                    self.start_rate,
                    self.max_rate,
                    low,
                    self.bisect_steps,
                    self.max_points,
                )
            )
        start = self.baseline_start_rate
        if rtf is not None and rtf < 1.0:
            low = min(self.baseline_rates or (start,))
            note = (
                f"the baseline makes audio at {rtf:.2f}x real time, slower than playback: no "
                f"request can stream in real time, so only its lowest rate ({low:g} req/s) runs"
            )
            return RatePlan(
                SearchSettings((low,), low, max(low, self.max_rate), low, 0, 1), note, False
            )
        top = max(self.max_rate, start)
        return RatePlan(
            SearchSettings(
                self.baseline_rates, start, top, start / 4, self.bisect_steps, self.max_points
            )
        )
