"""A session's lifecycle state, how it is to close, and its log adapter (gateway.session)."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from gateway.protocol import CloseCode


class SessionState(enum.IntEnum):
    AWAITING_START = 0
    ACTIVE = 1
    CLOSING = 2
    CLOSED = 3


@dataclass(frozen=True)
class CloseRequest:
    code: CloseCode
    reason: str
    drain: bool  # False: the socket is stuck, send nothing more before the close frame


class SessionLog(logging.LoggerAdapter):
    """Every line names its session (`session=<id>`, also `record.session_id` for JSON logs)."""

    def process(self, msg, kwargs):
        session_id = self.extra["session_id"] if self.extra else "-"
        kwargs.setdefault("extra", {})["session_id"] = session_id
        return f"session={session_id} {msg}", kwargs
