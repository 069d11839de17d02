"""The body of `POST /v1/audio/speech`, checked: OpenAI's fields (and Voxgate's sampling
extensions) → a `SpeechCall`, or an `HttpError` (gateway/http_common.py) naming the field and
what is accepted.

Pure: a function of the JSON body, the model's facts and the settings, so every rule is
testable without a server. What each field does here (docs/gateway.md says the same):

- `model`: the served model's name, or one of OpenAI's TTS model names (a drop-in client's
  `tts-1` then reaches the model this server serves).
- `input`: 1 to `max_text_chars` characters (4096 by default, OpenAI's limit too).
- `voice`: one of the model's voices (a string, or OpenAI's `{"id": ...}` form).
- `response_format`: mp3 (OpenAI's default), opus, aac, flac, wav, pcm, where this PyAV build
  has the encoder (gateway/speech_formats.py).
- `speed`: OpenAI's range 0.25-4.0 (default 1.0): the model's audio is time-stretched to it,
  pitch unchanged (gateway/time_stretch.py), so it works for every model.
- `instructions`: no served model takes a style prompt, so they are accepted but not applied;
  the response says so in its `Voxgate-Ignored-Fields` header.
- `stream_format`: `audio` (the file's bytes as they are made; default) or `sse`.
- `temperature`, `top_p`, `min_p`, `seed`, `max_tokens`: Voxgate's sampling fields (the openai
  client sends them with `extra_body`), checked as `session.start`'s are.
- `model_options`: the served model's per-request options (Chatterbox's exaggeration and
  cfg_weight; `extra_body` too), checked as `session.start`'s are.
- `realtime`: Voxgate's (`extra_body`), default true. `false` says no one plays the audio as
  it comes (a file to keep, a batch job): the engine then runs the request in the room the
  real-time streams leave, behind them, and decodes it in its codec's cheapest chunks
  (SpeechRequest.realtime); real-time admission does not refuse it, and its bytes may come
  slower than real time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.api import ModelFacts
from gateway.config import GatewaySettings
from gateway.http_common import bad
from gateway.protocol import AudioFormat, AudioSpec, json_int
from gateway.reply import SpeechOptions
from gateway.speech_formats import SPEECH_RATE, SpeechFormat
from gateway.speech_options import AskedOptions, OptionRefused, resolve_speech_options
from gateway.time_stretch import check_speed

OPENAI_TTS_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
SAMPLING_FIELDS = ("temperature", "top_p", "min_p", "seed", "max_tokens")
OPENAI_FIELDS = ("model", "input", "voice", "instructions", "response_format", "speed")
STREAM_FORMATS = ("audio", "sse")
DEFAULT_FORMAT = "mp3"  # OpenAI's default


@dataclass(frozen=True)
class SpeechCall:
    """A checked request."""

    text: str
    format: SpeechFormat
    stream_format: str
    # The reply's voice, sampling, model options, speed and `realtime`: 24 kHz PCM16 out,
    # which the response format's writer encodes.
    options: SpeechOptions
    ignored: tuple[str, ...] = field(default=())  # fields accepted but not applied


def _string(body: dict, name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad(name, f"'{name}' is required", "missing_required_parameter")
        return None
    if not isinstance(value, str):
        raise bad(name, f"'{name}' must be a string, got {type(value).__name__}")
    return value


def _model(body: dict, facts: ModelFacts, settings: GatewaySettings) -> None:
    model = _string(body, "model", required=True)
    served = {facts.name, *([settings.model] if settings.model else []), *OPENAI_TTS_MODELS}
    if model not in served:
        raise bad(
            "model",
            f"this server serves model {facts.name!r} (OpenAI's TTS model names reach it too); "
            f"got {model!r}",
            "model_not_found",
        )
    if facts.full_duplex or facts.accepts_turns:
        raise bad(
            "model",
            f"{facts.name} is a speech-to-speech model, not text-to-speech; "
            "talk to it over /v1/stream or /v1/realtime",
            "unsupported_model",
        )


def _text(body: dict, name: str, limit: int, required: bool) -> str | None:
    text = _string(body, name, required)
    if text is None:
        return None
    if required and not text.strip():
        raise bad(name, f"'{name}' is empty; send the text to speak")
    if len(text) > limit:
        raise bad(name, f"'{name}' is {len(text)} characters; the limit is {limit}")
    return text


def _voice(body: dict, facts: ModelFacts) -> str | None:
    value = body.get("voice")
    if isinstance(value, dict):
        if set(value) != {"id"}:
            raise bad("voice", 'a voice object is {"id": "<voice>"}')
        value = value["id"]
    if value is None:
        raise bad("voice", "'voice' is required", "missing_required_parameter")
    if not isinstance(value, str) or not value:
        raise bad("voice", "'voice' must be a voice name")
    # A model without named voices speaks in its own whatever an OpenAI client names.
    return value if facts.voices else None


def _format(body: dict, formats: dict[str, SpeechFormat]) -> SpeechFormat:
    name = _string(body, "response_format") or DEFAULT_FORMAT
    if name not in formats:
        raise bad(
            "response_format",
            f"response_format {name!r} is not available here; use one of {', '.join(formats)}",
        )
    return formats[name]


def _speed(body: dict) -> float:
    speed = body.get("speed")
    if speed is None:
        return 1.0
    try:
        return check_speed(speed, "speed")
    except ValueError as exc:
        raise bad("speed", str(exc)) from None


def _realtime(body: dict) -> bool:
    value = body.get("realtime")
    if value is None:
        return True
    if not isinstance(value, bool):
        raise bad("realtime", "'realtime' must be true or false")
    return value


def _stream_format(body: dict) -> str:
    value = _string(body, "stream_format") or "audio"
    if value not in STREAM_FORMATS:
        raise bad("stream_format", f"stream_format must be one of {', '.join(STREAM_FORMATS)}")
    return value


def _sampling(body: dict) -> dict[str, int | float]:
    """The sampling fields the body sets, type-checked (their ranges are the resolver's)."""
    chosen = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    for name, value in chosen.items():
        if name in ("seed", "max_tokens"):
            chosen[name] = json_int(value)
            if chosen[name] is None:
                raise bad(name, f"'{name}' must be an integer")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise bad(name, f"'{name}' must be a number")
    return chosen


def _model_options(body: dict) -> dict[str, Any]:
    """The model options the body sets (checked against the model by the resolver)."""
    given = body.get("model_options")
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise bad("model_options", "'model_options' must be an object")
    return given


def _options(body: dict, facts: ModelFacts, voice: str | None, speed: float) -> SpeechOptions:
    """The reply's options, resolved as session.start's are (gateway/speech_options.py): the
    model's sampling under the body's, max_tokens within its context, its model options."""
    asked = AskedOptions(voice, _sampling(body), _model_options(body), speed)
    output = AudioSpec(AudioFormat.PCM16, SPEECH_RATE)
    try:
        return resolve_speech_options(asked, facts, output, realtime=_realtime(body))
    except OptionRefused as refused:
        raise bad(refused.field, refused.message) from None


def parse_speech_request(
    body: object,
    facts: ModelFacts,
    settings: GatewaySettings,
    formats: dict[str, SpeechFormat],
) -> SpeechCall:
    """The checked request, or HttpError(400) for the first bad field."""
    if not isinstance(body, dict):
        raise bad(None, "the body must be a JSON object", None)
    known = {*OPENAI_FIELDS, "stream_format", "model_options", "realtime", *SAMPLING_FIELDS}
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad(unknown[0], f"unrecognized request argument supplied: {unknown[0]}", None)
    _model(body, facts, settings)
    text = _text(body, "input", settings.max_text_chars, required=True)
    voice = _voice(body, facts)
    fmt = _format(body, formats)
    speed = _speed(body)
    instructions = _text(body, "instructions", settings.max_text_chars, required=False)
    stream_format = _stream_format(body)
    return SpeechCall(
        text=text,
        format=fmt,
        stream_format=stream_format,
        options=_options(body, facts, voice, speed),
        ignored=("instructions",) if instructions and instructions.strip() else (),
    )
