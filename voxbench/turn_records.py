"""What the conversation client records (voxbench/conversations.py): plain data, no I/O.

A turn's reply is a `RequestRecord` whose request is the user's spoken turn: `sent_s` is the
end of the user's speech (the moment the clip's last frame left the microphone) and
`arrivals_ms` are the reply's frames after it, so `ttfa_ms` is the reply latency and every
metric of voxbench/metrics.py applies to a reply unchanged. Times in `*_s` fields are seconds
on the client's monotonic clock from the start of the point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from voxbench.records import RequestRecord


@dataclass
class TurnRecord(RequestRecord):
    """One user turn and its reply. `workload_id` names the clip spoken, `audio_seconds` and
    `tokens` are the reply asked for, `scheduled_s` when the speech was due to begin."""

    speech_s: float = 0.0  # the clip's length
    speech_began_s: float | None = None  # its first frame sent
    # When the server's end of the turn came, ms after the end of speech: the arrival of
    # `input.speech_stopped` (turn detection `vad`), or `input.commit` sent (`none`).
    turn_end_ms: float | None = None
    speech_events: int = 0  # `input.speech_started` events during the turn (VAD: one)
    reply_started_ms: float | None = None  # `response.started`, ms after the end of speech

    @property
    def reply_latency_ms(self) -> float | None:
        """First reply frame minus the end of the user's speech."""
        return self.ttfa_ms


@dataclass
class ConversationRecord:
    index: int  # position in the point's plan
    scheduled_s: float  # planned start (connect), from the start of the point
    turns_planned: int  # the turns it was to take (--turns-each, or as many as fit in time)
    connect_s: float | None = None
    started_s: float | None = None  # session.started received
    ended_s: float | None = None  # the session ended (or broke)
    refused: bool = False  # no room: 1013 / `overloaded` at session.start, or HTTP 503
    close_code: int | None = None  # the server's close code when it ended the session
    exception: str | None = None  # why the conversation broke, on the client's side
    turns: list[TurnRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every planned turn was answered in full, and nothing went wrong."""
        return (
            not self.refused
            and self.exception is None
            and len(self.turns) >= self.turns_planned
            and all(t.ok for t in self.turns)
        )

    @property
    def failure(self) -> str | None:
        if self.ok:
            return None
        if self.refused:
            return "refused"
        failed = [t.failure for t in self.turns if not t.ok]
        if failed:
            return f"turn_{failed[0]}"
        return self.exception.split(":")[0] if self.exception else "unfinished"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["turns"] = [t.to_json() for t in self.turns]
        data["ok"], data["failure"] = self.ok, self.failure
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConversationRecord:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["turns"] = [TurnRecord.from_json(t) for t in data.get("turns", [])]
        return cls(**fields)
