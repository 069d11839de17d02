"""What the server sends, as typed values (docs/protocol.md, "Server → client").

`parse_event` turns one JSON text frame into one of these; `Audio` is a binary frame. Every
value carries `received_at`, the client's monotonic clock when the frame arrived (a benchmark
measures arrival times with it). Events this client does not know arrive as `UnknownEvent`, as
the protocol asks of clients: a newer server may add optional events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voxgate.client.errors import ServerError, server_error


@dataclass(frozen=True)
class Word:
    """A word of a response and when it is said, in ms from the response's first audio."""

    word: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class SessionInfo:
    """`session.started`: what the session is (model, formats, caps, optional extensions)."""

    session_id: str
    model: str
    input_audio: dict[str, Any] | None  # None: the model takes no audio
    output_audio: dict[str, Any]
    limits: dict[str, Any]
    model_kind: str = "tts"  # tts, turns or full_duplex
    token_rate_hz: float | None = None
    word_timings: bool = False  # responses carry `response.words`
    # The server transcribes this model's spoken turns: connect(input_transcription=...) may ask.
    transcribes: bool = False
    # The session's voice (None: the model has none); after a voice_clip, the new voice's id,
    # which the same API key may pass as `voice` later.
    voice: str | None = None
    # The options the model takes (`model_options` on connect or speak): each a dict with
    # name, default, help, and a number's minimum/maximum or a text option's kind and choices.
    model_options: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    received_at: float = 0.0


@dataclass(frozen=True)
class ResponseStarted:
    response_id: str
    received_at: float = 0.0


@dataclass(frozen=True)
class Audio:
    """One binary frame of the current response: `data` as sent, `pcm` decoded (float32 mono
    at `sample_rate`; None when the session does not decode)."""

    response_id: str | None
    data: bytes
    pcm: np.ndarray | None
    sample_rate: int
    received_at: float = 0.0


@dataclass(frozen=True)
class TranscriptDelta:
    response_id: str
    text: str
    received_at: float = 0.0


@dataclass(frozen=True)
class Words:
    """`response.words`: words the response has spoken, sent with their audio."""

    response_id: str
    words: tuple[Word, ...]
    received_at: float = 0.0


@dataclass(frozen=True)
class SpeechStarted:
    audio_ms: int
    received_at: float = 0.0


@dataclass(frozen=True)
class SpeechStopped:
    audio_ms: int
    received_at: float = 0.0


@dataclass(frozen=True)
class InputTranscript:
    """A spoken turn's words (sessions started with `input_transcription`), or `error` saying
    why there are none."""

    text: str
    error: str | None = None
    received_at: float = 0.0


@dataclass(frozen=True)
class ResponseDone:
    response_id: str
    status: str  # completed, cancelled, length, failed
    audio_ms: int
    ttfa_ms: int | None
    # A cancelled response with word timings: the words the listener heard to their end.
    heard_words: tuple[Word, ...] | None = None
    received_at: float = 0.0


@dataclass(frozen=True)
class Error:
    code: str
    message: str
    fatal: bool = False
    received_at: float = 0.0

    def exception(self, close_code: int | None = None) -> ServerError:
        """The typed exception for this error (voxgate.client.errors)."""
        return server_error(self.code, self.message, self.fatal, close_code)


@dataclass(frozen=True)
class SessionEnded:
    reason: str
    received_at: float = 0.0


@dataclass(frozen=True)
class UnknownEvent:
    type: str
    raw: dict[str, Any]
    received_at: float = 0.0


Event = (
    SessionInfo
    | ResponseStarted
    | Audio
    | TranscriptDelta
    | Words
    | SpeechStarted
    | SpeechStopped
    | InputTranscript
    | ResponseDone
    | Error
    | SessionEnded
    | UnknownEvent
)


def _words(raw: Any) -> tuple[Word, ...]:
    return tuple(Word(w["word"], int(w["start_ms"]), int(w["end_ms"])) for w in raw or ())


def parse_event(text: str, received_at: float = 0.0) -> Event:
    """One server text frame → its event. Raises ValueError for a frame that is not a JSON
    object with a string `type` (a server that does not speak the protocol)."""
    obj = json.loads(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ValueError(f"not a protocol event: {text[:200]!r}")
    kind, at = obj["type"], received_at
    try:
        match kind:
            case "session.started":
                return SessionInfo(
                    obj["session_id"],
                    obj["model"],
                    obj.get("input_audio"),
                    obj["output_audio"],
                    obj.get("limits") or {},
                    model_kind=obj.get("model_kind", "tts"),
                    token_rate_hz=obj.get("token_rate_hz"),
                    word_timings=bool(obj.get("word_timings", False)),
                    transcribes=obj.get("transcribes") is True,
                    voice=obj.get("voice"),
                    model_options=tuple(obj.get("model_options") or ()),
                    raw=obj,
                    received_at=at,
                )
            case "response.started":
                return ResponseStarted(obj["response_id"], at)
            case "transcript.delta":
                return TranscriptDelta(obj["response_id"], obj["text"], at)
            case "response.words":
                return Words(obj["response_id"], _words(obj["words"]), at)
            case "input.speech_started":
                return SpeechStarted(obj["audio_ms"], at)
            case "input.speech_stopped":
                return SpeechStopped(obj["audio_ms"], at)
            case "input.transcript":
                return InputTranscript(obj["text"], obj.get("error"), at)
            case "response.done":
                heard = obj.get("heard_words")
                return ResponseDone(
                    obj["response_id"],
                    obj["status"],
                    obj["audio_ms"],
                    obj.get("ttfa_ms"),
                    None if heard is None else _words(heard),
                    at,
                )
            case "error":
                return Error(obj["code"], obj.get("message", ""), bool(obj.get("fatal")), at)
            case "session.ended":
                return SessionEnded(obj["reason"], at)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed {kind} event ({exc!r}): {text[:200]!r}") from None
    return UnknownEvent(kind, obj, at)
