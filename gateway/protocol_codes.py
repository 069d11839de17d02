"""The native protocol's vocabulary (docs/protocol.md): the subprotocol name, event types, error and
close codes, statuses, audio formats and the values each field may take. These are the names and
numbers on the wire; gateway.protocol builds the events out of them and re-exports them all."""

from __future__ import annotations

import enum
from collections.abc import Mapping

SUBPROTOCOL = "voxgate.v1"
# Browsers cannot set headers on a WebSocket, so a key may ride in an offered subprotocol.
BEARER_SUBPROTOCOL_PREFIX = "bearer."


class ClientEventType(enum.StrEnum):
    SESSION_START = "session.start"
    TEXT = "text"
    RESPONSE_CANCEL = "response.cancel"
    PLAYBACK = "playback"
    SESSION_END = "session.end"
    INPUT_COMMIT = "input.commit"


class ServerEventType(enum.StrEnum):
    SESSION_STARTED = "session.started"
    RESPONSE_STARTED = "response.started"
    TRANSCRIPT_DELTA = "transcript.delta"
    # Optional extension: sessions whose `session.started` says `word_timings: true`.
    RESPONSE_WORDS = "response.words"
    SPEECH_STARTED = "input.speech_started"
    SPEECH_STOPPED = "input.speech_stopped"
    # Optional extension: sessions that asked for `input_transcription`.
    INPUT_TRANSCRIPT = "input.transcript"
    RESPONSE_DONE = "response.done"
    ERROR = "error"
    SESSION_ENDED = "session.ended"


class ErrorCode(enum.StrEnum):
    BAD_JSON = "bad_json"
    UNKNOWN_TYPE = "unknown_type"
    BAD_FIELD = "bad_field"
    NOT_STARTED = "not_started"
    ALREADY_STARTED = "already_started"
    UNSUPPORTED_AUDIO = "unsupported_audio"
    UNSUPPORTED_INPUT = "unsupported_input"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    MODEL_ERROR = "model_error"
    INTERNAL = "internal"


class CloseCode(enum.IntEnum):
    NORMAL = 1000
    UNSUPPORTED_DATA = 1003
    INVALID_PAYLOAD = 1007
    POLICY = 1008
    TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013


class ResponseStatus(enum.StrEnum):
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    LENGTH = "length"
    FAILED = "failed"


class EndReason(enum.StrEnum):
    """`session.ended` reasons (docs/protocol.md leaves the values open; docs/gateway.md lists
    them)."""

    CLIENT_ENDED = "client_ended"
    IDLE_TIMEOUT = "idle_timeout"


class AudioFormat(enum.StrEnum):
    OPUS = "opus"
    PCM16 = "pcm16"
    MULAW = "mulaw"
    # G.711 A-law, 8 kHz: served to compatibility endpoints (OpenAI Realtime `g711_alaw`); not
    # part of the native v1 protocol, whose decoder refuses it (NATIVE_FORMATS).
    ALAW = "alaw"


NATIVE_FORMATS = (AudioFormat.OPUS, AudioFormat.PCM16, AudioFormat.MULAW)


class ModelKind(enum.StrEnum):
    """`session.started` `model_kind`: how a client converses with the session's model (an
    additive field of v1, docs/gateway.md "session.started"; clients ignore unknown values)."""

    TTS = "tts"  # text in, speech out
    TURNS = "turns"  # turn-based speech-to-speech: spoken (or typed) user turns, spoken replies
    FULL_DUPLEX = "full_duplex"  # one continuous spoken conversation, audio in only

    @classmethod
    def of(cls, facts) -> ModelKind:
        """The kind of a model, from its ModelFacts."""
        if facts.full_duplex:
            return cls.FULL_DUPLEX
        return cls.TURNS if facts.accepts_turns else cls.TTS


class TurnDetectionType(enum.StrEnum):
    VAD = "vad"
    NONE = "none"


FRAME_MS = (10, 20, 40, 60)
DEFAULT_FRAME_MS = 20
SAMPLE_RATES: Mapping[AudioFormat, tuple[int, ...]] = {
    AudioFormat.OPUS: (48000,),
    AudioFormat.PCM16: (8000, 16000, 24000, 48000),
    AudioFormat.MULAW: (8000,),
    AudioFormat.ALAW: (8000,),
}
# pcm16 defaults to 24 kHz: the native rate of most TTS codecs (SNAC, Mimi), so no resampling.
DEFAULT_SAMPLE_RATE: Mapping[AudioFormat, int] = {
    AudioFormat.OPUS: 48000,
    AudioFormat.PCM16: 24000,
    AudioFormat.MULAW: 8000,
    AudioFormat.ALAW: 8000,
}
SAMPLING_FIELDS: Mapping[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "repetition_penalty": float,
    "seed": int,
    "max_tokens": int,
    "min_tokens": int,
}
