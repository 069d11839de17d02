"""The native protocol, version 1 (docs/protocol.md), as data.

Every event is a frozen dataclass; `decode_text_frame` turns a client's JSON text frame into one
of them (or raises `ProtocolError` carrying the error code to answer with), `encode_event` turns
a server event into its JSON text. Handlers never see raw dicts or string literals: the codes
and names live in gateway.protocol_codes, once, and are re-exported here so that handlers import
the whole protocol from one module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from gateway import client_json
from gateway.input_transcription import (
    InputTranscription,
    TranscriptionRefused,
    checked_transcription,
)
from gateway.protocol_codes import (
    BEARER_SUBPROTOCOL_PREFIX,
    DEFAULT_FRAME_MS,
    DEFAULT_SAMPLE_RATE,
    FRAME_MS,
    NATIVE_FORMATS,
    SAMPLE_RATES,
    SAMPLING_FIELDS,
    SUBPROTOCOL,
    AudioFormat,
    ClientEventType,
    CloseCode,
    EndReason,
    ErrorCode,
    ModelKind,
    ResponseStatus,
    ServerEventType,
    TurnDetectionType,
)
from gateway.response_overrides import ResponseOverrides
from gateway.time_stretch import check_speed

__all__ = [
    # re-exported vocabulary (gateway.protocol_codes)
    "BEARER_SUBPROTOCOL_PREFIX",
    "DEFAULT_FRAME_MS",
    "DEFAULT_SAMPLE_RATE",
    "FRAME_MS",
    "SAMPLE_RATES",
    "SAMPLING_FIELDS",
    "SUBPROTOCOL",
    "AudioFormat",
    "ClientEventType",
    "CloseCode",
    "EndReason",
    "ErrorCode",
    "ModelKind",
    "ResponseStatus",
    "ServerEventType",
    "TurnDetectionType",
    # defined here
    "ProtocolError",
    "AudioSpec",
    "TurnDetection",
    "Limits",
    "SessionStart",
    "TextInput",
    "ResponseCancel",
    "Playback",
    "SessionEnd",
    "InputCommit",
    "AudioInput",
    "ClientEvent",
    "SessionStarted",
    "ResponseStarted",
    "TranscriptDelta",
    "SpokenWord",
    "ResponseWords",
    "SpeechStarted",
    "SpeechStopped",
    "ResponseDone",
    "ErrorEvent",
    "SessionEnded",
    "ServerEvent",
    "encode_event",
    "decode_text_frame",
    "decode_sampling",
    "json_type_name",
]


class ProtocolError(Exception):
    """A client frame the server cannot honour; `code` is the error code to answer with.
    `param`: the field to blame, as the client's protocol names it (the OpenAI Realtime API's
    `error.param`, a path from the event's root such as `session.voice`), None when no one
    field is; the native protocol does not send it (ErrorEvent)."""

    def __init__(self, code: ErrorCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


# --- shared values ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AudioSpec:
    format: AudioFormat = AudioFormat.OPUS
    sample_rate: int = 48000
    frame_ms: int = DEFAULT_FRAME_MS

    @property
    def samples_per_frame(self) -> int:
        return self.sample_rate * self.frame_ms // 1000


@dataclass(frozen=True)
class TurnDetection:
    type: TurnDetectionType = TurnDetectionType.VAD
    silence_ms: int = 500
    # What a finished turn does to responses (OpenAI's `create_response` and
    # `interrupt_response`; the native protocol has no field for them, so its sessions keep
    # these defaults): the server answers each turn itself, and the user starting to speak
    # cancels the reply playing (barge-in). `create_response` false holds each turn until the
    # client asks for its response; with `type` none it holds the turns the client commits
    # (the Realtime API's manual turns). `interrupt_response` only matters with `type` vad.
    create_response: bool = True
    interrupt_response: bool = True

    def same_vad(self, other: TurnDetection) -> bool:
        """Whether `other` detects turns as this does (only what it does with them may differ)."""
        return (self.type, self.silence_ms) == (other.type, other.silence_ms)


@dataclass(frozen=True)
class Limits:
    """The caps and timeouts in force, stated in `session.started`."""

    max_text_chars: int
    max_response_text_chars: int
    max_frame_bytes: int
    max_message_bytes: int
    max_queued_responses: int
    start_timeout_ms: int
    idle_timeout_ms: int
    lead_ms: int
    max_send_queue_ms: int


# --- client → server --------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionStart:
    model: str | None = None
    voice: str | None = None
    input_audio: AudioSpec | None = None
    output_audio: AudioSpec | None = None
    sampling: Mapping[str, float | int | None] = field(default_factory=dict)
    turn_detection: TurnDetection | None = None
    voice_clip: ClipUpload | None = None  # make the session's voice from a clip (optional)
    # The served model's own per-request options (`session.started.model_options` lists them);
    # checked against the model in gateway/session_start.py.
    model_options: Mapping[str, Any] = field(default_factory=dict)
    # OpenAI's `speed` (optional extension): the session's replies time-stretched to it.
    speed: float | None = None
    # Transcripts of the user's spoken turns (optional extension, turn-based models).
    input_transcription: InputTranscription | None = None


@dataclass(frozen=True)
class TextInput:
    text: str
    final: bool = True
    # The options of the response this text opens, over the session's: the native event's
    # `model_options`, or an adapter's (OpenAI response.create's). None: the session's.
    overrides: ResponseOverrides | None = None
    # Turn-based models: the id of the user turn it makes (gateway.wire's ForgetTurn takes it
    # out again); set by an adapter that deletes items (OpenAI's), never by the native event.
    turn_id: str | None = None
    # Turn-based models: False joins the turn to the conversation unanswered (OpenAI's user
    # messages followed by an assistant message); set by an adapter, never by the native event.
    answered: bool = True


@dataclass(frozen=True)
class ResponseCancel:
    pass


@dataclass(frozen=True)
class Playback:
    played_ms: float


@dataclass(frozen=True)
class SessionEnd:
    pass


@dataclass(frozen=True)
class InputCommit:
    pass


@dataclass(frozen=True)
class AudioInput:
    """A binary frame: user audio in the session's `input_audio` format."""

    data: bytes


ClientEvent = (
    SessionStart | TextInput | ResponseCancel | Playback | SessionEnd | InputCommit | AudioInput
)


# --- server → client --------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionStarted:
    TYPE: ClassVar[ServerEventType] = ServerEventType.SESSION_STARTED
    session_id: str
    model: str
    input_audio: AudioSpec | None  # None: the model takes no audio input
    output_audio: AudioSpec
    limits: Limits
    # What the client may send: text (tts), audio and text turns (turns), audio only (full_duplex).
    model_kind: ModelKind = ModelKind.TTS
    # The model's LLM tokens per second of audio (additive, like model_kind): a client that sets
    # min_tokens / max_tokens for a length of audio (`voxgate bench`) sizes them with it.
    token_rate_hz: float | None = None
    # The session's voice (additive, left out when the model has none): with session.start's
    # voice_clip, the id of the voice made from it, which the same API key may name afterwards.
    voice: str | None = None
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = (
        "voice",
        "speed",
        "input_transcription",
        "transcribes",
    )
    # The model's per-request options, each {name, default, minimum, maximum, help} (additive):
    # what `model_options` on session.start or a response's first `text` may set.
    model_options: tuple[Mapping[str, Any], ...] = ()
    # The session's responses carry `response.words` (the model knows when it says each word).
    word_timings: bool = False
    # The session's `speed` (additive), when session.start set one: it is applied.
    speed: float | None = None
    # Transcripts of spoken turns (additive), when session.start asked: {model, language, prompt}.
    input_transcription: InputTranscription | None = None
    # True where the client could ask for them on this connection (additive; left out
    # otherwise): a turn-based
    # model on a server that transcribes. A client learns it before asking, not by a refusal.
    transcribes: bool | None = None


@dataclass(frozen=True)
class ResponseStarted:
    TYPE: ClassVar[ServerEventType] = ServerEventType.RESPONSE_STARTED
    response_id: str
    # ResponseOverrides.echo of the input that started the response: the adapter's own data
    # (OpenAI's `metadata`); the native protocol has no such field.
    echo: object = None
    # The options the reply runs with (gateway.reply.SpeechOptions: the session's, with the
    # response's own over them; None where it has no such options), for adapters that show
    # them (OpenAI's response resource); the native protocol does not send them.
    options: object = None
    ADAPTER_ONLY: ClassVar[tuple[str, ...]] = ("echo", "options")


@dataclass(frozen=True)
class TranscriptDelta:
    TYPE: ClassVar[ServerEventType] = ServerEventType.TRANSCRIPT_DELTA
    response_id: str
    text: str


@dataclass(frozen=True)
class SpokenWord:
    """A word of a response and when it is said, in ms of the response's audio."""

    word: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class ResponseWords:
    """Words the response has spoken, sent with the audio that says them (optional extension,
    announced by `session.started` `word_timings`)."""

    TYPE: ClassVar[ServerEventType] = ServerEventType.RESPONSE_WORDS
    response_id: str
    words: tuple[SpokenWord, ...]


@dataclass(frozen=True)
class SpeechStarted:
    TYPE: ClassVar[ServerEventType] = ServerEventType.SPEECH_STARTED
    audio_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    TYPE: ClassVar[ServerEventType] = ServerEventType.SPEECH_STOPPED
    audio_ms: int


@dataclass(frozen=True)
class InputTranscript:
    """A committed spoken turn's words (optional extension), for a session that asked
    (SpeechOptions.input_transcription): `text`, or `error` saying why there are none."""

    TYPE: ClassVar[ServerEventType] = ServerEventType.INPUT_TRANSCRIPT
    text: str = ""
    error: str | None = None
    # The turn's id in the conversation (InputCommitted's), for adapters that name its item.
    turn_id: str = ""
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ("error",)
    ADAPTER_ONLY: ClassVar[tuple[str, ...]] = ("turn_id",)


@dataclass(frozen=True)
class ResponseDone:
    TYPE: ClassVar[ServerEventType] = ServerEventType.RESPONSE_DONE
    response_id: str
    status: ResponseStatus
    audio_ms: int
    ttfa_ms: int | None  # None: the response ended before any audio was sent
    # A response cut short (`cancelled`) in a session with word timings: the words the listener
    # heard to their end (by its `playback` report, else the server's send clock). Left out of
    # the event when None.
    heard_words: tuple[SpokenWord, ...] | None = None
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ("heard_words",)


@dataclass(frozen=True)
class ErrorEvent:
    TYPE: ClassVar[ServerEventType] = ServerEventType.ERROR
    code: ErrorCode
    message: str
    fatal: bool = False
    # The field to blame (ProtocolError.param), for adapters whose protocol reports it (the
    # Realtime API's `error.param`); the native protocol has no such field.
    param: str | None = None
    # The client event it answers, where an adapter's protocol names it (the Realtime API's
    # `error.event_id`) and the error comes after that event was handled; None: the event
    # being handled.
    event_id: str | None = None
    ADAPTER_ONLY: ClassVar[tuple[str, ...]] = ("param", "event_id")


@dataclass(frozen=True)
class SessionEnded:
    TYPE: ClassVar[ServerEventType] = ServerEventType.SESSION_ENDED
    reason: EndReason


ServerEvent = (
    SessionStarted
    | ResponseStarted
    | TranscriptDelta
    | ResponseWords
    | SpeechStarted
    | SpeechStopped
    | InputTranscript
    | ResponseDone
    | ErrorEvent
    | SessionEnded
)


def encode_event(event: ServerEvent) -> str:
    """The JSON text frame of a server event (StrEnum values serialise as their strings).
    Optional fields an event lists in OMIT_WHEN_NONE are left out while unset; those it lists
    in ADAPTER_ONLY (for compatibility endpoints) are never sent."""
    body = asdict(event)
    for name in getattr(event, "ADAPTER_ONLY", ()):
        del body[name]
    for name in getattr(event, "OMIT_WHEN_NONE", ()):
        if body[name] is None:
            del body[name]
    return json.dumps({"type": event.TYPE.value, **body}, separators=(",", ":"))


# --- decoding ---------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_text_frame(text: str) -> ClientEvent:
    """Parse one client text frame. Raises ProtocolError (bad_json, unknown_type, bad_field,
    unsupported_audio) with a message that says what would have been accepted."""
    try:
        obj = client_json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"text frames must be JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_JSON, "a text frame must hold one JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.BAD_FIELD, "every event needs a string field `type`")
    try:
        event_type = ClientEventType(kind)
    except ValueError:
        known = ", ".join(t.value for t in ClientEventType)
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE, f"unknown event type {kind[:64]!r}; known: {known}"
        ) from None
    return _DECODERS[event_type](obj)


def _decode_session_start(obj: dict[str, Any]) -> SessionStart:
    return SessionStart(
        model=_optional(obj, "model", str),
        voice=_optional(obj, "voice", str),
        input_audio=_audio_spec(obj, "input_audio"),
        output_audio=_audio_spec(obj, "output_audio"),
        sampling=_sampling(obj),
        turn_detection=_turn_detection(obj),
        voice_clip=_voice_clip(obj),
        model_options=_model_options(obj) or {},
        speed=_speed(obj),
        input_transcription=_input_transcription(obj),
    )


def _input_transcription(obj: Mapping[str, Any]) -> InputTranscription | None:
    """`input_transcription`: {language?, prompt?} (the server's model transcribes), or null."""
    value = obj.get("input_transcription")
    if value is None:
        return None
    try:
        return checked_transcription(value, "input_transcription", model_required=False)
    except TranscriptionRefused as refused:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(refused), refused.path) from None


def _speed(obj: Mapping[str, Any]) -> float | None:
    if obj.get("speed") is None:
        return None
    try:
        return check_speed(obj["speed"])
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(exc)) from None


def _voice_clip(obj: dict[str, Any]) -> ClipUpload | None:
    if obj.get("voice_clip") is None:
        return None
    if obj.get("voice") is not None:
        raise ProtocolError(
            ErrorCode.BAD_FIELD, "send `voice` or `voice_clip`, not both: the clip makes the voice"
        )
    return decode_clip_upload(obj["voice_clip"], "voice_clip")


def _decode_text(obj: dict[str, Any]) -> TextInput:
    text = obj.get("text")
    if not isinstance(text, str):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`text` must be a string")
    final = _optional(obj, "final", bool)
    model_options = _model_options(obj)
    overrides = None if model_options is None else ResponseOverrides(model_options=model_options)
    return TextInput(text=text, final=True if final is None else final, overrides=overrides)


def _decode_playback(obj: dict[str, Any]) -> Playback:
    played = obj.get("played_ms")
    if not _is_number(played) or played < 0 or not math.isfinite(played):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`played_ms` must be a number >= 0")
    return Playback(played_ms=float(played))


_DECODERS = {
    ClientEventType.SESSION_START: _decode_session_start,
    ClientEventType.TEXT: _decode_text,
    ClientEventType.RESPONSE_CANCEL: lambda _obj: ResponseCancel(),
    ClientEventType.PLAYBACK: _decode_playback,
    ClientEventType.SESSION_END: lambda _obj: SessionEnd(),
    ClientEventType.INPUT_COMMIT: lambda _obj: InputCommit(),
}


def _is_number(value: object) -> bool:
    # bool is an int in Python but never a number on the wire.
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_int(value: object) -> int | None:
    """`value` as an integer where JSON calls it one: 100, or 100.0 (a number with no fraction,
    as some encoders write every number); None for anything else, true and false included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


# How an error names the type a field takes: as JSON spells it, for the client who reads it.
JSON_TYPE_NAMES: Mapping[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
}


def json_type_name(kind: type) -> str:
    return JSON_TYPE_NAMES.get(kind, f"a {kind.__name__}")


def _optional(obj: Mapping[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"`{name}` must be {json_type_name(kind)}")
    return value


def _audio_spec(obj: Mapping[str, Any], name: str) -> AudioSpec | None:
    raw = obj.get(name)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"`{name}` must be an object")
    fmt_name = raw.get("format", AudioFormat.OPUS.value)
    try:
        fmt = AudioFormat(fmt_name)
        if fmt not in NATIVE_FORMATS:
            raise ValueError(fmt_name)
    except ValueError:
        formats = ", ".join(f.value for f in NATIVE_FORMATS)
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_AUDIO, f"`{name}.format` must be one of {formats}"
        ) from None
    rate = json_int(raw.get("sample_rate", DEFAULT_SAMPLE_RATE[fmt]))
    if rate not in SAMPLE_RATES[fmt]:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_AUDIO,
            f"`{name}.sample_rate` for {fmt.value} must be one of {SAMPLE_RATES[fmt]}",
        )
    frame_ms = json_int(raw.get("frame_ms", DEFAULT_FRAME_MS))
    if frame_ms not in FRAME_MS:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_AUDIO, f"`{name}.frame_ms` must be one of {FRAME_MS}"
        )
    return AudioSpec(format=fmt, sample_rate=rate, frame_ms=frame_ms)


def _sampling(obj: Mapping[str, Any]) -> dict[str, float | int | None]:
    return decode_sampling(obj.get("sampling"))


def decode_sampling(raw: object, path: str = "sampling") -> dict[str, float | int | None]:
    """A `sampling` object (docs/protocol.md) → the overrides it names, type-checked (the values'
    ranges are SamplingParams' to check). Raises ProtocolError(bad_field), its `param` the
    field under `path` (where the client's event holds the object)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`sampling` must be an object", path)
    out: dict[str, float | int | None] = {}
    for key, value in raw.items():
        kind = SAMPLING_FIELDS.get(key)
        if kind is None:
            known = ", ".join(SAMPLING_FIELDS)
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"unknown sampling field {key[:64]!r}; known: {known}",
                f"{path}.{key[:64]}",
            )
        if value is None and key == "seed":
            out[key] = None
        elif kind is int and json_int(value) is not None:
            out[key] = json_int(value)
        elif kind is float and _is_number(value) and math.isfinite(value):
            out[key] = float(value)
        else:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`sampling.{key}` must be {json_type_name(kind)}",
                f"{path}.{key}",
            )
    return out


def _model_options(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """A `model_options` object, as given (its names and values are the served model's to
    check: gateway/session_start.py). Raises ProtocolError(bad_field) for a non-object."""
    raw = obj.get("model_options")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`model_options` must be an object")
    return dict(raw)


def _turn_detection(obj: Mapping[str, Any]) -> TurnDetection | None:
    raw = obj.get("turn_detection")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`turn_detection` must be an object")
    try:
        kind = TurnDetectionType(raw.get("type", TurnDetectionType.VAD.value))
    except ValueError:
        raise ProtocolError(
            ErrorCode.BAD_FIELD, "`turn_detection.type` must be vad or none"
        ) from None
    silence = json_int(raw.get("silence_ms", TurnDetection.silence_ms))
    if silence is None or not 0 < silence <= 10_000:
        raise ProtocolError(ErrorCode.BAD_FIELD, "`turn_detection.silence_ms` must be in 1..10000")
    return TurnDetection(type=kind, silence_ms=silence)


# --- voices from clients: session.start `voice_clip` (and POST /v1/voices' body) -------------
CLIP_FIELDS = ("audio", "transcript", "name")


@dataclass(frozen=True)
class ClipUpload:
    """A reference clip to make a voice from: the clip file (WAV, FLAC, MP3, Ogg, WebM ...)
    base64-encoded, the words said in it, and a label. gateway/client_voices.py checks it."""

    audio: str = field(repr=False)
    transcript: str | None = None
    name: str | None = None


def decode_clip_upload(raw: object, where: str | None) -> ClipUpload:
    """Check a clip object's shape (its content is checked when it is encoded). `where`: the
    object's field in its event (session.start's `voice_clip`), None for a body whose fields
    are top-level (POST /v1/voices). Raises ProtocolError(bad_field) naming the field, as its
    `param` too."""

    def path(name: str) -> str:
        return f"{where}.{name}" if where else name

    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"`{where or 'the body'}` must be an object")
    unknown = sorted(set(raw) - set(CLIP_FIELDS))
    if unknown:
        name = path(unknown[0][:64])
        raise ProtocolError(
            ErrorCode.BAD_FIELD, f"unknown field `{name}`; known: {', '.join(CLIP_FIELDS)}", name
        )
    audio = raw.get("audio")
    if not isinstance(audio, str) or not audio:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"`{path('audio')}` must be the clip file, base64-encoded",
            path("audio"),
        )
    for name in ("transcript", "name"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise ProtocolError(ErrorCode.BAD_FIELD, f"`{path(name)}` must be a string", path(name))
    return ClipUpload(audio, raw.get("transcript"), raw.get("name"))


# --- end of voices from clients ---------------------------------------------------------------
