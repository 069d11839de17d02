"""The part of the OpenAI Realtime WebSocket protocol that audio clients use, as data.

Client events decode into frozen dataclasses (`decode_client_event`, raising ProtocolError with
a native error code); server events are built by pure functions that return the JSON text of one
event. Both API dialects are spoken: the beta one (`OpenAI-Beta: realtime=v1`, event names such
as `response.audio.delta`, flat session fields such as `output_audio_format`) and the GA one
(`response.output_audio.delta`, `session.audio.output.format`). The names and shapes follow the
Realtime API reference and the `openai` package's `types/realtime` and `types/beta/realtime`.
Nothing here knows about sessions: gateway.realtime maps these onto the native session layer.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway import client_json
from gateway.input_transcription import TranscriptionRefused, checked_transcription
from gateway.protocol import ErrorCode, ProtocolError, json_int
from gateway.realtime_tools import (
    FunctionCallEvent,
    FunctionOutputEvent,
    decode_function_call,
    decode_function_output,
    decode_tool_choice,
    decode_tools,
)
from gateway.time_stretch import check_speed
from models.tool_calls import FunctionTool

BETA_HEADER_VALUE = "realtime=v1"  # `OpenAI-Beta` header of beta clients
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"  # what browsers offer instead of that header
SUBPROTOCOL = "realtime"  # browsers offer it; the server selects it


class Dialect(enum.StrEnum):
    BETA = "beta"
    GA = "ga"


class RealtimeFormat(enum.StrEnum):
    """Audio formats by their beta names; `pcm16` is 24 kHz, the G.711 ones 8 kHz."""

    PCM16 = "pcm16"
    G711_ULAW = "g711_ulaw"
    G711_ALAW = "g711_alaw"


# GA names the same formats with MIME-like objects: {"type": "audio/pcm", "rate": 24000}.
_GA_FORMAT_TYPES = {
    "audio/pcm": RealtimeFormat.PCM16,
    "audio/pcmu": RealtimeFormat.G711_ULAW,
    "audio/pcma": RealtimeFormat.G711_ALAW,
}
GA_FORMAT_OBJECTS = {
    RealtimeFormat.PCM16: {"type": "audio/pcm", "rate": 24000},
    RealtimeFormat.G711_ULAW: {"type": "audio/pcmu"},
    RealtimeFormat.G711_ALAW: {"type": "audio/pcma"},
}

UNSET: Any = object()  # a field the client did not send (distinct from an explicit null)


# --- client → server --------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionUpdateEvent:
    event_id: str | None
    voice: str | None = None
    output_format: RealtimeFormat | None = None
    turn_detection: Any = UNSET  # dict, None (off) or UNSET
    instructions: str | None = None
    temperature: float | None = None
    max_output_tokens: int | Literal["inf"] | None = None  # "inf": the model's default
    # Voxgate extension: the native `sampling` object (seed, top_p, …), for repeatable output.
    sampling: dict[str, Any] = field(default_factory=dict)
    input_format: RealtimeFormat | None = None  # turn-based speech-to-speech models
    speed: float | None = None  # `speed` / GA `audio.output.speed`, checked
    # Function calling (gateway/realtime_tools.py): None = not sent (unchanged).
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: str | None = None  # auto | none
    # Transcripts of the user's spoken turns: InputTranscription, None (off) or UNSET.
    input_transcription: Any = UNSET
    # Where the event set each field it sent (beta and GA name some differently, and either
    # may be sent): `voice`, `speed`, `temperature`, `max_tokens`, `turn_detection`,
    # `input_format` and each `sampling` field → its path, for an error's `param`.
    paths: dict[str, str] = field(default_factory=dict, compare=False)


# Session fields no served model applies, each with the values that ask for nothing (what the
# session already does); any other value is refused with `bad_field` instead of being echoed.
# Paths are (beta field, GA field) where the dialects differ.
def _speaks_audio(value: Any) -> bool:
    return isinstance(value, list) and "audio" in value


Unserved = tuple[tuple[str, Any, str], ...]  # (path, asks_nothing(value), why)
_AUDIO_ONLY = "every response is audio"
_UNSERVED_FIELDS: Unserved = (
    ("modalities", lambda v: v is None or _speaks_audio(v), _AUDIO_ONLY),
    ("output_modalities", lambda v: v is None or _speaks_audio(v), _AUDIO_ONLY),
    ("input_audio_noise_reduction", lambda v: v is None, "noise reduction is not served"),
    ("audio.input.noise_reduction", lambda v: v is None, "noise reduction is not served"),
    ("prompt", lambda v: v is None, "stored prompts are not served"),
    (
        "model_options",
        lambda v: v is None or v == {},
        "a model's own options are set on /v1/stream or /v1/audio/speech, not in an OpenAI session",
    ),
)
# The same for response.create's `response`: a response always answers the session's one
# conversation, with the session's context, and joins it.
_UNSERVED_RESPONSE_FIELDS: Unserved = (
    (
        "conversation",
        lambda v: v is None or v == "auto",
        "out-of-band responses are not served: every response answers the session's "
        "conversation and joins it, as `auto` does",
    ),
    (
        "input",
        lambda v: v is None,
        "a response answers the session's conversation; a context of its own is not served",
    ),
    ("modalities", lambda v: v is None or _speaks_audio(v), _AUDIO_ONLY),
    ("output_modalities", lambda v: v is None or _speaks_audio(v), _AUDIO_ONLY),
    ("prompt", lambda v: v is None, "stored prompts are not served"),
)


def _refuse_unserved(obj: dict, fields: Unserved, root: str) -> None:
    """`obj` (the event's `root` object) holds none of `fields` with a value that asks for
    something; else ProtocolError(bad_field) naming the first such field."""
    for path, asks_nothing, why in fields:
        value: Any = obj
        *parents, name = path.split(".")
        for parent in parents:
            value = value.get(parent) if isinstance(value, dict) else None
        if not isinstance(value, dict) or name not in value or asks_nothing(value[name]):
            continue
        raise _bad(
            f"`{root}.{path}` is not applied by this server ({why}); leave it out",
            f"{root}.{path}",
        )


@dataclass(frozen=True)
class ItemCreateEvent:
    event_id: str | None
    item_id: str | None
    role: str  # user | assistant | system
    text: str  # the item's text parts, joined
    previous_item_id: str | None = None  # where it goes (None: at the end)


MAX_METADATA_PAIRS = 16  # OpenAI's limits on a response's `metadata`
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


@dataclass(frozen=True)
class ResponseCreateEvent:
    """`response.create`, with the fields of its `response` object: options for this one
    response (None: not sent, the session's), each checked for its shape only."""

    event_id: str | None
    voice: str | None = None
    temperature: float | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    instructions: str | None = None
    output_format: RealtimeFormat | None = None
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: str | None = None
    metadata: dict[str, str] | None = None  # echoed in the response's events
    # Where the event set each field (beta and GA name some differently), by the names
    # SessionUpdateEvent.paths uses (`voice`, `temperature`, `max_tokens`, …): for `param`.
    paths: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ResponseCancelEvent:
    event_id: str | None


@dataclass(frozen=True)
class AudioInputEvent:
    """`input_audio_buffer.append` (with `audio`), `.commit` and `.clear`."""

    event_id: str | None
    type: str
    audio: bytes = b""


@dataclass(frozen=True)
class TruncateEvent:
    """`conversation.item.truncate`: the user heard only `audio_end_ms` of an assistant item."""

    event_id: str | None
    item_id: object
    content_index: object
    audio_end_ms: object

    def check(self) -> None:
        """ProtocolError(bad_field) unless the fields are well-formed. Separate from decoding
        so that a text-to-speech server refuses the event as audio input first."""
        if not isinstance(self.item_id, str) or not self.item_id:
            raise _bad("`item_id` must name the assistant item to truncate", "item_id")
        for name in ("content_index", "audio_end_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _bad(f"`{name}` must be an integer >= 0", name)


@dataclass(frozen=True)
class ItemRefEvent:
    """`conversation.item.retrieve` / `conversation.item.delete`: one item, by its id."""

    event_id: str | None
    type: str
    item_id: str


RealtimeClientEvent = (
    SessionUpdateEvent
    | ItemCreateEvent
    | ResponseCreateEvent
    | ResponseCancelEvent
    | AudioInputEvent
    | TruncateEvent
    | ItemRefEvent
    | FunctionOutputEvent
    | FunctionCallEvent
)


def _bad(
    message: str, param: str | None = None, code: ErrorCode = ErrorCode.BAD_FIELD
) -> ProtocolError:
    """`param`: the offending field's path from the event's root (`session.temperature`)."""
    return ProtocolError(code, message, param)


def decode_client_event(text: str) -> RealtimeClientEvent:
    try:
        obj = client_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _bad(f"events must be JSON: {exc}", code=ErrorCode.BAD_JSON) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise _bad("an event must be a JSON object with a string `type`", code=ErrorCode.BAD_JSON)
    kind = obj["type"]
    decoder = _DECODERS.get(kind)
    if decoder is None:
        known = ", ".join(_DECODERS)
        raise _bad(
            f"unsupported event type {kind[:64]!r}; supported: {known}",
            "type",
            code=ErrorCode.UNKNOWN_TYPE,
        )
    return decoder(obj)


def event_id_of(text: str) -> str | None:
    """The client's `event_id`, for error replies, even from an event that does not decode."""
    try:
        value = json.loads(text).get("event_id")
    except (ValueError, RecursionError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _str(obj: dict, name: str, path: str | None = None) -> str | None:
    """`obj[name]`, a string or null; `path`: where the event holds it (default `name`)."""
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise _bad(f"`{name}` must be a string", path or name)
    return value


def _decode_format(value: Any, name: str) -> RealtimeFormat | None:
    if value is None:
        return None
    if isinstance(value, str):  # beta: "pcm16"
        try:
            return RealtimeFormat(value)
        except ValueError:
            pass
    elif isinstance(value, dict) and value.get("type") in _GA_FORMAT_TYPES:  # GA
        fmt = _GA_FORMAT_TYPES[value["type"]]
        if fmt is RealtimeFormat.PCM16 and value.get("rate", 24000) != 24000:
            raise _bad(f"`{name}.rate` must be 24000", f"{name}.rate")
        return fmt
    beta = ", ".join(f.value for f in RealtimeFormat)
    ga = ", ".join(_GA_FORMAT_TYPES)
    raise ProtocolError(
        ErrorCode.UNSUPPORTED_AUDIO, f"`{name}` must be one of {beta} (or type {ga})", name
    )


def _object(obj: dict, name: str) -> dict:
    """`obj[name]` when it is an object, else {} (a shape the caller checks or ignores)."""
    value = obj.get(name)
    return value if isinstance(value, dict) else {}


def _audio_output(obj: dict) -> dict:
    """GA's `audio.output` of a session or response ({} when not sent)."""
    return _object(_object(obj, "audio"), "output")


def _decode_voice(obj: dict, root: str) -> tuple[str | None, str]:
    """The voice of a session or response (`root`), GA `audio.output.voice` or beta `voice`,
    and its path as sent."""
    out = _audio_output(obj)
    path = f"{root}.audio.output.voice" if "voice" in out else f"{root}.voice"
    return _str(out if "voice" in out else obj, "voice", path), path


def _decode_output_format(obj: dict, root: str) -> tuple[RealtimeFormat | None, str]:
    """The output audio format, GA `audio.output.format` or beta `output_audio_format`, and
    its path as sent."""
    out = _audio_output(obj)
    if "format" in out:
        path = f"{root}.audio.output.format"
        return _decode_format(out["format"], path), path
    path = f"{root}.output_audio_format"
    return _decode_format(obj.get("output_audio_format"), path), path


def _decode_temperature(obj: dict, root: str) -> float | None:
    value = obj.get("temperature")
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _bad(f"`{root}.temperature` must be a number", f"{root}.temperature")
    return float(value)


def _decode_max_tokens(obj: dict, root: str) -> tuple[int | Literal["inf"] | None, str]:
    """GA `max_output_tokens` or beta `max_response_output_tokens` (an integer or "inf"),
    and its path as sent."""
    name = "max_output_tokens" if "max_output_tokens" in obj else "max_response_output_tokens"
    value = obj.get(name)
    if value not in (None, "inf"):
        value = json_int(value)
        if value is None:
            raise _bad('`max_output_tokens` must be an integer or "inf"', f"{root}.{name}")
    return value, f"{root}.{name}"


def _decode_session_update(obj: dict) -> SessionUpdateEvent:
    session = obj.get("session")
    if not isinstance(session, dict):
        raise _bad("`session` must be an object", "session")
    _refuse_unserved(session, _UNSERVED_FIELDS, "session")
    out = _audio_output(session)
    inp = _object(_object(session, "audio"), "input")
    voice, voice_path = _decode_voice(session, "session")
    # Each field's path as sent: GA nests some under `audio`, beta (or a GA client) flat.
    paths = {
        "voice": voice_path,
        "speed": "session.audio.output.speed" if "speed" in out else "session.speed",
        "input_format": (
            "session.audio.input.format" if "format" in inp else "session.input_audio_format"
        ),
        "turn_detection": (
            "session.audio.input.turn_detection"
            if "turn_detection" in inp
            else "session.turn_detection"
        ),
    }
    fmt, _ = _decode_output_format(session, "session")
    if "format" in inp:
        in_fmt = _decode_format(inp["format"], "session.audio.input.format")
    else:
        in_fmt = _decode_format(session.get("input_audio_format"), "session.input_audio_format")
    transcription = _decode_transcription(session, inp, paths)
    turn = inp.get("turn_detection", session.get("turn_detection", UNSET))
    if turn is not UNSET and turn is not None and not isinstance(turn, dict):
        raise _bad("`turn_detection` must be an object or null", paths["turn_detection"])
    temperature = _decode_temperature(session, "session")
    max_tokens, max_tokens_path = _decode_max_tokens(session, "session")
    sampling = session.get("sampling", {})
    if not isinstance(sampling, dict):
        raise _bad("`session.sampling` must be an object", "session.sampling")
    # The sampling fields: the Voxgate extension's, unless a standard field set them.
    paths.update({key: f"session.sampling.{key}" for key in sampling})
    if temperature is not None:
        paths["temperature"] = "session.temperature"
    if max_tokens is not None:
        paths["max_tokens"] = max_tokens_path
    speed = out.get("speed", session.get("speed"))
    if speed is not None:
        try:
            speed = check_speed(speed, paths["speed"])
        except ValueError as exc:
            raise _bad(str(exc), paths["speed"]) from None
    return SessionUpdateEvent(
        event_id=_str(obj, "event_id"),
        voice=voice,
        output_format=fmt,
        input_format=in_fmt,
        turn_detection=turn,
        instructions=_str(session, "instructions", "session.instructions"),
        temperature=temperature,
        max_output_tokens=max_tokens,
        sampling=sampling,
        speed=speed,
        tools=decode_tools(session["tools"]) if "tools" in session else None,
        tool_choice=decode_tool_choice(session.get("tool_choice")),
        input_transcription=transcription,
        paths=paths,
    )


def _decode_transcription(session: dict, inp: dict, paths: dict[str, str]) -> Any:
    """GA `audio.input.transcription` or beta `input_audio_transcription`: an object with a
    `model` (any name: the server transcribes with its own), an optional `language` (ISO-639-1)
    and `prompt`; null turns transcription off; UNSET when not sent. Its path goes in `paths`
    ("input_transcription")."""
    if "transcription" in inp:
        value, path = inp["transcription"], "session.audio.input.transcription"
    elif "input_audio_transcription" in session:
        value, path = session["input_audio_transcription"], "session.input_audio_transcription"
    else:
        return UNSET
    paths["input_transcription"] = path
    if value is None:
        return None
    try:
        return checked_transcription(value, path, model_required=True)
    except TranscriptionRefused as refused:
        raise _bad(str(refused), refused.path) from None


def _decode_metadata(value: Any) -> dict[str, str] | None:
    """A response's `metadata`: up to 16 string pairs, keys of at most 64 characters and
    values of at most 512 (OpenAI's limits)."""
    path = "response.metadata"
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(f"`{path}` must be an object of string values, or null", path)
    if len(value) > MAX_METADATA_PAIRS:
        raise _bad(f"`{path}` has {len(value)} pairs; the limit is {MAX_METADATA_PAIRS}", path)
    for key, text in value.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise _bad(f"`{path}` keys are at most {MAX_METADATA_KEY_CHARS} characters", path)
        if len(text) > MAX_METADATA_VALUE_CHARS:
            raise _bad(
                f"`{path}` values are at most {MAX_METADATA_VALUE_CHARS} characters; "
                f"{key!r} has {len(text)}",
                path,
            )
    return dict(value)


def _decode_response_create(obj: dict) -> ResponseCreateEvent:
    event_id = _str(obj, "event_id")
    response = obj.get("response")
    if response is None:
        return ResponseCreateEvent(event_id)
    if not isinstance(response, dict):
        raise _bad("`response` must be an object", "response")
    _refuse_unserved(response, _UNSERVED_RESPONSE_FIELDS, "response")
    voice, voice_path = _decode_voice(response, "response")
    fmt, format_path = _decode_output_format(response, "response")
    max_tokens, max_tokens_path = _decode_max_tokens(response, "response")
    paths = {
        "voice": voice_path,
        "output_format": format_path,
        "temperature": "response.temperature",
        "max_tokens": max_tokens_path,
        "instructions": "response.instructions",
        "metadata": "response.metadata",
    }
    return ResponseCreateEvent(
        event_id,
        voice=voice,
        temperature=_decode_temperature(response, "response"),
        max_output_tokens=max_tokens,
        instructions=_str(response, "instructions", "response.instructions"),
        output_format=fmt,
        tools=decode_tools(response["tools"], "response.tools") if "tools" in response else None,
        tool_choice=decode_tool_choice(response.get("tool_choice"), "response.tool_choice"),
        metadata=_decode_metadata(response.get("metadata")),
        paths=paths,
    )


_TEXT_PARTS = ("input_text", "text", "output_text")


def _decode_item_create(obj: dict) -> ItemCreateEvent | FunctionOutputEvent | FunctionCallEvent:
    item = obj.get("item")
    if not isinstance(item, dict):
        raise _bad("`item` must be an object", "item")
    previous = _str(obj, "previous_item_id", "previous_item_id")
    kind = item.get("type", "message")
    if kind == "function_call_output":
        output = decode_function_output(_str(obj, "event_id"), item)
        return dataclasses.replace(output, previous_item_id=previous)
    if kind == "function_call":
        call = decode_function_call(_str(obj, "event_id"), item)
        return dataclasses.replace(call, previous_item_id=previous)
    if kind != "message":
        raise _bad(
            "`item.type` must be message, function_call or function_call_output", "item.type"
        )
    role = item.get("role")
    if role not in ("user", "assistant", "system"):
        raise _bad("`item.role` must be user, assistant or system", "item.role")
    content = item.get("content")
    if not isinstance(content, list) or not content:
        raise _bad("`item.content` must be a non-empty list", "item.content")
    texts = []
    for i, part in enumerate(content):
        where = f"item.content[{i}]"
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "input_audio":
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED_INPUT,
                    "audio content parts are not taken in conversation.item.create: send text "
                    "parts (input_text), or, to a speech-to-speech model, stream the user's "
                    "audio with input_audio_buffer.append",
                    f"{where}.type",
                )
            raise _bad(f"content parts must be one of {', '.join(_TEXT_PARTS)}", f"{where}.type")
        if not isinstance(part.get("text"), str):
            raise _bad("a text content part needs a string `text`", f"{where}.text")
        texts.append(part["text"])
    item_id = _str(item, "id", "item.id")
    return ItemCreateEvent(_str(obj, "event_id"), item_id, role, " ".join(texts), previous)


def _decode_append(obj: dict) -> AudioInputEvent:
    audio = obj.get("audio")
    if not isinstance(audio, str):
        raise _bad("`audio` must be a base64 string", "audio")
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("`audio` is not valid base64", "audio") from None
    return AudioInputEvent(_str(obj, "event_id"), obj["type"], data)


def _decode_truncate(obj: dict) -> TruncateEvent:
    def whole(value: object) -> object:  # 250.0 as 250; anything else as sent, for check()
        number = json_int(value)
        return value if number is None else number

    return TruncateEvent(
        _str(obj, "event_id"),
        obj.get("item_id"),
        whole(obj.get("content_index", 0)),
        whole(obj.get("audio_end_ms")),
    )


def _decode_item_ref(obj: dict) -> ItemRefEvent:
    item_id = obj.get("item_id")
    if not isinstance(item_id, str) or not item_id:
        raise _bad("`item_id` must name an item of the conversation", "item_id")
    return ItemRefEvent(_str(obj, "event_id"), obj["type"], item_id)


_DECODERS = {
    "session.update": _decode_session_update,
    "conversation.item.create": _decode_item_create,
    "response.create": _decode_response_create,
    "response.cancel": lambda obj: ResponseCancelEvent(_str(obj, "event_id")),
    "input_audio_buffer.append": _decode_append,
    "input_audio_buffer.commit": lambda obj: AudioInputEvent(_str(obj, "event_id"), obj["type"]),
    "input_audio_buffer.clear": lambda obj: AudioInputEvent(_str(obj, "event_id"), obj["type"]),
    "conversation.item.truncate": _decode_truncate,
    "conversation.item.retrieve": _decode_item_ref,
    "conversation.item.delete": _decode_item_ref,
}
