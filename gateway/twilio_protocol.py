"""Twilio Media Streams (bidirectional, `<Connect><Stream>`), as data.

Messages from Twilio decode into frozen dataclasses (`decode_twilio_message`, raising
ProtocolError); messages to Twilio are built by pure functions returning their JSON text; the
TwiML that connects a call to the stream is built with ElementTree. Shapes follow Twilio's
"Media Streams - WebSocket Messages" reference: every message is a JSON text frame with an
`event` field; audio is base64 μ-law, 8 kHz mono, no header.
"""

from __future__ import annotations

import base64
import binascii
import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from gateway import client_json
from gateway.protocol import ErrorCode, ProtocolError, json_type_name

MULAW_ENCODING = "audio/x-mulaw"
MULAW_RATE = 8000


# --- Twilio → server --------------------------------------------------------------------------
@dataclass(frozen=True)
class Connected:
    protocol: str
    version: str


@dataclass(frozen=True)
class Start:
    stream_sid: str
    call_sid: str
    account_sid: str
    tracks: tuple[str, ...]
    custom_parameters: dict[str, str]
    encoding: str
    sample_rate: int


@dataclass(frozen=True)
class Media:
    stream_sid: str
    track: str
    chunk: int
    timestamp_ms: int
    payload: bytes  # μ-law bytes


@dataclass(frozen=True)
class Mark:
    """A mark the server sent, echoed once the audio before it has played (or been cleared)."""

    stream_sid: str
    name: str


@dataclass(frozen=True)
class Dtmf:
    stream_sid: str
    digit: str


@dataclass(frozen=True)
class Stop:
    stream_sid: str
    call_sid: str = ""


TwilioMessage = Connected | Start | Media | Mark | Dtmf | Stop


def _field(obj: dict, name: str, kind: type = str, default: Any = None) -> Any:
    value = obj.get(name, default)
    if not isinstance(value, kind):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"`{name}` must be {json_type_name(kind)}")
    return value


def _int(obj: dict, name: str) -> int:
    # Twilio sends counters and timestamps as decimal strings.
    value = obj.get(name, "0")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"`{name}` must be a decimal number") from None


def _decode_start(obj: dict) -> Start:
    start = _field(obj, "start", dict)
    fmt = _field(start, "mediaFormat", dict, {})
    params = _field(start, "customParameters", dict, {})
    return Start(
        stream_sid=_field(start, "streamSid", str, obj.get("streamSid")),
        call_sid=_field(start, "callSid", str, ""),
        account_sid=_field(start, "accountSid", str, ""),
        tracks=tuple(_field(start, "tracks", list, ["inbound"])),
        custom_parameters={str(k): str(v) for k, v in params.items()},
        encoding=_field(fmt, "encoding", str, MULAW_ENCODING),
        sample_rate=_field(fmt, "sampleRate", int, MULAW_RATE),
    )


def _decode_media(obj: dict) -> Media:
    media = _field(obj, "media", dict)
    try:
        payload = base64.b64decode(_field(media, "payload"), validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(ErrorCode.BAD_FIELD, "`media.payload` is not valid base64") from None
    return Media(
        stream_sid=_field(obj, "streamSid"),
        track=_field(media, "track", str, "inbound"),
        chunk=_int(media, "chunk"),
        timestamp_ms=_int(media, "timestamp"),
        payload=payload,
    )


_DECODERS = {
    "connected": lambda o: Connected(_field(o, "protocol", str, ""), _field(o, "version", str, "")),
    "start": _decode_start,
    "media": _decode_media,
    "mark": lambda o: Mark(_field(o, "streamSid"), _field(_field(o, "mark", dict), "name")),
    "dtmf": lambda o: Dtmf(_field(o, "streamSid"), _field(_field(o, "dtmf", dict), "digit")),
    "stop": lambda o: Stop(_field(o, "streamSid"), _field(o.get("stop") or {}, "callSid", str, "")),
}


def decode_twilio_message(text: str) -> TwilioMessage:
    try:
        obj = client_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"messages must be JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise ProtocolError(ErrorCode.BAD_JSON, "a message must be an object with an `event`")
    decoder = _DECODERS.get(obj["event"])
    if decoder is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown event {obj['event'][:64]!r}")
    return decoder(obj)


# --- server → Twilio --------------------------------------------------------------------------
def _message(event: str, stream_sid: str, **fields: Any) -> str:
    return json.dumps({"event": event, "streamSid": stream_sid, **fields}, separators=(",", ":"))


def encode_media(stream_sid: str, mulaw: bytes) -> str:
    return _message("media", stream_sid, media={"payload": base64.b64encode(mulaw).decode()})


def encode_mark(stream_sid: str, name: str) -> str:
    return _message("mark", stream_sid, mark={"name": name})


def encode_clear(stream_sid: str) -> str:
    """Drop the audio Twilio has buffered for playback (barge-in); it echoes pending marks."""
    return _message("clear", stream_sid)


# --- TwiML ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConnectStream:
    url: str  # wss://HOST/v1/twilio
    parameters: dict[str, str] = field(default_factory=dict)  # arrive as start.customParameters


def encode_twiml(connect: ConnectStream) -> str:
    """`<Response><Connect><Stream url=…><Parameter …/></Stream></Connect></Response>`."""
    response = ET.Element("Response")
    stream = ET.SubElement(ET.SubElement(response, "Connect"), "Stream", url=connect.url)
    for name, value in connect.parameters.items():
        ET.SubElement(stream, "Parameter", name=name, value=value)
    body = ET.tostring(response, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>' + body
