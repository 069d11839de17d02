"""What the load generator records for one request: plain data, no I/O, no torch.

Times are seconds on the client's monotonic clock, relative to the start of the rate point
(`*_s` fields) or, for audio frames, milliseconds after the final `text` was sent (`arrivals_ms`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# response.done statuses that mean "the audio asked for was delivered". With random weights
# every request ends at max_tokens, so `length` is the normal outcome.
OK_STATUSES = ("completed", "length")


@dataclass
class RequestRecord:
    index: int  # position in the rate point's plan
    workload_id: str
    audio_seconds: float  # what the workload asked for (per engine request)
    tokens: int  # min_tokens = max_tokens sent in session.start
    scheduled_s: float  # planned send time of the final text
    connect_s: float | None = None  # connection attempt began
    started_s: float | None = None  # session.started received
    sent_s: float | None = None  # final text sent: TTFA counts from here
    arrivals_ms: list[float] = field(default_factory=list)  # every binary frame, after sent_s
    frame_ms: float | None = None  # duration of every frame when they are uniform (opus)
    durations_ms: list[float] | None = None  # per-frame durations when not uniform (pcm16)
    done: dict[str, Any] | None = None  # response.done: status, audio_ms, ttfa_ms
    errors: list[dict[str, Any]] = field(default_factory=list)  # error events received
    close_code: int | None = None  # the server's close code, if it closed first
    exception: str | None = None  # client-side failure (refused handshake, timeout, …)
    aborted: bool = False  # stopped by the benchmark itself (early stop)
    late: bool = False  # some frame missed its deadline t0 + b + o (seen live)
    # response.started's id (the server's request traces are named after it), and sent_s on
    # the monotonic clock: a served point's engine shares it (voxbench/late_chunks.py).
    response_id: str | None = None
    sent_at: float | None = None

    # --- derived ---------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """The response completed with audio and nothing went wrong on the way."""
        return (
            self.done is not None
            and self.done.get("status") in OK_STATUSES
            and bool(self.arrivals_ms)
            and not any(e.get("fatal") for e in self.errors)
            and not self.aborted
        )

    @property
    def failure(self) -> str | None:
        """A short reason for a failed request, None when it is ok."""
        if self.ok:
            return None
        if self.aborted:
            return "late_then_stopped" if self.late else "stopped"
        if self.done is not None and self.done.get("status") not in OK_STATUSES:
            # With the error that ended it, where one came: a refusal (real-time admission's
            # `overloaded`) reads apart from a fault.
            code = self.errors[-1].get("code") if self.errors else None
            return f"status_{self.done.get('status')}" + (f"_{code}" if code else "")
        if self.errors:
            return f"error_{self.errors[-1].get('code')}"
        if self.close_code is not None:
            return f"close_{self.close_code}"
        if self.exception:
            return self.exception.split(":")[0]
        if self.done is not None:
            return "no_audio"
        return "unfinished"

    def frame_durations_ms(self) -> list[float]:
        if self.durations_ms is not None:
            return self.durations_ms
        return [self.frame_ms or 0.0] * len(self.arrivals_ms)

    @property
    def ttfa_ms(self) -> float | None:
        return self.arrivals_ms[0] if self.arrivals_ms else None

    @property
    def received_audio_ms(self) -> float:
        return float(sum(self.frame_durations_ms()))

    # --- serialisation ---------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["arrivals_ms"] = [round(a, 2) for a in self.arrivals_ms]
        if self.durations_ms is None:
            del data["durations_ms"]
        data["ok"] = self.ok
        data["failure"] = self.failure
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**fields)
