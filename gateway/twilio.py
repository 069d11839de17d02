"""`/v1/twilio`: Twilio Media Streams as an adapter onto the native session layer.

A `TwilioWire` translates one bidirectional stream (`<Connect><Stream>`):

    connected                → nothing (the stream's identity comes with `start`)
    start                    → session.start (μ-law 8 kHz out), then the `greeting` custom
                               parameter, if any, as a `text` to speak
    media (caller audio)     → the session's audio when the model takes audio; dropped for a
                               text-to-speech model, which has no use for it
    mark (echoed by Twilio)  → `playback`: the caller has heard the response up to that point
    dtmf                     → `response.cancel`: a key press interrupts what is playing
    stop                     → `session.end`

and sends back: each 20 ms audio frame as a `media` message, a `mark` named
`<response_id>:<audio_ms>` every MARK_EVERY_MS of audio and one more, `…:end`, at the end of
each response (its echo says the caller heard all of it), and
`clear` when a response is cancelled (barge-in), so Twilio drops what it has buffered.
Twilio has no error message: errors are logged and counted (metrics), never sent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from engine.api import ModelFacts
from gateway.protocol import (
    AudioFormat,
    AudioInput,
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    Playback,
    ProtocolError,
    ResponseCancel,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
    SessionEnd,
    SessionStart,
    TextInput,
    decode_sampling,
    json_type_name,
)
from gateway.socket_items import OutAudio, OutItem, OutText
from gateway.time_stretch import check_speed
from gateway.twilio_protocol import (
    MULAW_ENCODING,
    MULAW_RATE,
    Connected,
    Dtmf,
    Mark,
    Media,
    Start,
    Stop,
    decode_twilio_message,
    encode_clear,
    encode_mark,
    encode_media,
)
from gateway.wire import Wire, WireEvent, WireInput

log = logging.getLogger("voxgate.gateway")

SPEC = AudioSpec(AudioFormat.MULAW, MULAW_RATE, 20)
MARK_EVERY_MS = 500
END_MARK = "end"  # the last mark of a response: `<response_id>:<audio_ms>:end`
# Custom parameters (<Parameter name=… value=…/> in the TwiML) that set the session's sampling.
_SAMPLING_PARAMETERS = {"temperature": float, "top_p": float, "seed": int, "max_tokens": int}


def _sampling_from(parameters: dict[str, str]) -> dict[str, float | int | None]:
    raw: dict[str, float | int] = {}
    for name, kind in _SAMPLING_PARAMETERS.items():
        if name in parameters:
            try:
                raw[name] = kind(parameters[name])
            except ValueError:
                raise ProtocolError(
                    ErrorCode.BAD_FIELD, f"parameter {name} must be {json_type_name(kind)}"
                ) from None
    return decode_sampling(raw)


def _speed_from(parameters: dict[str, str]) -> float | None:
    """The `speed` custom parameter (text, as every parameter), checked."""
    raw: object = parameters.get("speed")
    if raw is None:
        return None
    with contextlib.suppress(ValueError):  # not a number: check_speed says what it must be
        raw = float(str(raw))
    try:
        return check_speed(raw, "parameter speed")
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, str(exc)) from None


class TwilioWire(Wire):
    def __init__(self, facts: ModelFacts) -> None:
        self._facts = facts
        self.stream_sid: str | None = None
        self._response_id: str | None = None  # the response playing, for its marks
        self._sent_ms = 0  # of that response
        self._since_mark_ms = 0

    # --- Twilio → session ------------------------------------------------------------------
    def decode_text(self, text: str) -> Sequence[WireInput]:
        message = decode_twilio_message(text)
        if isinstance(message, Connected):
            return ()
        if isinstance(message, Start):
            return self._start(message)
        if self.stream_sid is None:
            raise ProtocolError(ErrorCode.NOT_STARTED, "the stream sends `start` before anything")
        if message.stream_sid != self.stream_sid:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"unknown streamSid {message.stream_sid!r}")
        if isinstance(message, Media):
            return (AudioInput(message.payload),) if self._facts.accepts_audio else ()
        if isinstance(message, Mark):
            return self._heard(message.name)
        if isinstance(message, Dtmf):
            log.info("twilio stream=%s dtmf=%s: interrupting", self.stream_sid, message.digit)
            return (ResponseCancel(),)
        if isinstance(message, Stop):
            return (SessionEnd(),)
        return ()

    def decode_binary(self, data: bytes) -> Sequence[WireInput]:
        raise ProtocolError(ErrorCode.BAD_FIELD, "Media Streams messages are JSON text frames")

    def _start(self, start: Start) -> Sequence[WireInput]:
        if self.stream_sid is not None:
            raise ProtocolError(ErrorCode.ALREADY_STARTED, "a stream starts once")
        if start.encoding != MULAW_ENCODING or start.sample_rate != MULAW_RATE:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_AUDIO,
                f"media must be {MULAW_ENCODING} at {MULAW_RATE} Hz, got {start.encoding}",
            )
        self.stream_sid = start.stream_sid
        params = start.custom_parameters
        session = SessionStart(
            voice=params.get("voice"),
            input_audio=SPEC if self._facts.accepts_audio else None,
            output_audio=SPEC,
            sampling=_sampling_from(params),
            speed=_speed_from(params),
        )
        greeting = params.get("greeting", "").strip()
        return (session, TextInput(greeting)) if greeting else (session,)

    def _heard(self, name: str) -> Sequence[WireInput]:
        response_id, _, played = name.removesuffix(f":{END_MARK}").rpartition(":")
        if response_id != self._response_id or not played.isdigit():
            return ()  # a finished response's mark, or not one of ours
        return (Playback(float(played)),)

    # --- session → Twilio ------------------------------------------------------------------
    def encode_event(self, event: WireEvent) -> Sequence[OutItem]:
        if isinstance(event, ResponseStarted):
            self._response_id, self._sent_ms, self._since_mark_ms = event.response_id, 0, 0
            return ()
        if isinstance(event, ResponseDone) and self.stream_sid is not None:
            self._response_id = None
            if event.status is ResponseStatus.CANCELLED:
                return (OutText(encode_clear(self.stream_sid)),)
            name = f"{event.response_id}:{event.audio_ms}:{END_MARK}"
            return (OutText(encode_mark(self.stream_sid, name)),)
        if isinstance(event, ErrorEvent):
            log.info("twilio stream=%s error %s: %s", self.stream_sid, event.code, event.message)
        return ()

    def encode_audio(self, data: bytes, duration_ms: int) -> Sequence[OutItem]:
        if self.stream_sid is None or self._response_id is None:
            raise RuntimeError("audio outside a response")
        items: list[OutItem] = [OutAudio(encode_media(self.stream_sid, data), duration_ms)]
        self._sent_ms += duration_ms
        self._since_mark_ms += duration_ms
        if self._since_mark_ms >= MARK_EVERY_MS:
            self._since_mark_ms = 0
            name = f"{self._response_id}:{self._sent_ms}"
            items.append(OutText(encode_mark(self.stream_sid, name)))
        return items
