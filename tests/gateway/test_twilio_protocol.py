"""The Twilio Media Streams codec (gateway.twilio_protocol) and the wire's pure parts, on the
message examples of Twilio's WebSocket messages reference."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET

import pytest

from gateway.protocol import ErrorCode, ProtocolError
from gateway.twilio_protocol import (
    Connected,
    ConnectStream,
    Dtmf,
    Mark,
    Media,
    Start,
    Stop,
    decode_twilio_message,
    encode_clear,
    encode_mark,
    encode_media,
    encode_twiml,
)

SID = "MZXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"


def test_documented_messages_decode():
    assert decode_twilio_message(
        '{"event": "connected", "protocol": "Call", "version": "1.0.0"}'
    ) == Connected("Call", "1.0.0")
    start = {
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": "ACXX",
            "streamSid": SID,
            "callSid": "CAXX",
            "tracks": ["inbound", "outbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"FirstName": "Jane"},
        },
        "streamSid": SID,
    }
    assert decode_twilio_message(json.dumps(start)) == Start(
        SID, "CAXX", "ACXX", ("inbound", "outbound"), {"FirstName": "Jane"}, "audio/x-mulaw", 8000
    )
    media = {
        "event": "media",
        "sequenceNumber": "3",
        "media": {"track": "outbound", "chunk": "1", "timestamp": "5", "payload": "/38A"},
        "streamSid": SID,
    }
    assert decode_twilio_message(json.dumps(media)) == Media(SID, "outbound", 1, 5, b"\xff\x7f\x00")
    mark = {"event": "mark", "sequenceNumber": "4", "streamSid": SID, "mark": {"name": "label"}}
    assert decode_twilio_message(json.dumps(mark)) == Mark(SID, "label")
    dtmf = {"event": "dtmf", "streamSid": SID, "sequenceNumber": "5",
            "dtmf": {"track": "inbound_track", "digit": "1"}}  # fmt: skip
    assert decode_twilio_message(json.dumps(dtmf)) == Dtmf(SID, "1")
    stop = {"event": "stop", "sequenceNumber": "5", "streamSid": SID,
            "stop": {"accountSid": "ACXX", "callSid": "CAXX"}}  # fmt: skip
    assert decode_twilio_message(json.dumps(stop)) == Stop(SID, "CAXX")


@pytest.mark.parametrize(
    "text, code",
    [
        ("not json", ErrorCode.BAD_JSON),
        ('{"event": "hangup"}', ErrorCode.UNKNOWN_TYPE),
        ('{"event": "media", "streamSid": "MZ", "media": {"payload": "@@"}}', ErrorCode.BAD_FIELD),
        ('{"event": "mark", "streamSid": "MZ"}', ErrorCode.BAD_FIELD),
    ],
)
def test_bad_messages(text, code):
    with pytest.raises(ProtocolError) as err:
        decode_twilio_message(text)
    assert err.value.code == code


def test_outbound_messages_have_the_documented_shape():
    assert json.loads(encode_media(SID, b"\xff\x7f")) == {
        "event": "media",
        "streamSid": SID,
        "media": {"payload": base64.b64encode(b"\xff\x7f").decode()},
    }
    assert json.loads(encode_mark(SID, "m1")) == {
        "event": "mark",
        "streamSid": SID,
        "mark": {"name": "m1"},
    }
    assert json.loads(encode_clear(SID)) == {"event": "clear", "streamSid": SID}


def test_twiml_escapes_parameters():
    xml = encode_twiml(ConnectStream("wss://x.example/v1/twilio", {"greeting": '<"Hi">'}))
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream')
    parameter = ET.fromstring(xml.split("?>", 1)[1]).find("./Connect/Stream/Parameter")
    assert parameter.attrib == {"name": "greeting", "value": '<"Hi">'}
