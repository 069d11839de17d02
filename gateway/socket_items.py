"""What goes out on a session's socket, in order: text frames, audio frames and the close.
A `Wire` (gateway/wire.py) encodes the session's events and audio into these, the session's
`SendQueue` (gateway/pacing.py) holds them and its writer (gateway/socket_writer.py) sends
them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutText:
    text: str


@dataclass(frozen=True)
class OutAudio:
    data: bytes | str  # a binary frame, or a text frame carrying audio (e.g. base64 in JSON)
    duration_ms: int


@dataclass(frozen=True)
class OutClose:
    code: int
    reason: str = ""


OutItem = OutText | OutAudio | OutClose
