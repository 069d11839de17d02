"""Client JSON (gateway/client_json.py): a lone UTF-16 surrogate escape is refused where the
JSON is read, on every endpoint, instead of failing later inside a tokenizer as an internal
error; surrogate pairs, escaped backslashes and ordinary text pass as json reads them."""

from __future__ import annotations

import json

import pytest

from gateway import client_json
from gateway.protocol import ErrorCode, ProtocolError, decode_text_frame
from gateway.realtime_protocol import decode_client_event
from gateway.twilio_protocol import decode_twilio_message


@pytest.mark.parametrize(
    "text",
    [
        '{"text": "\\ud83d\\ude00 and \\u00e9"}',  # a pair: one astral character
        '{"text": "\\\\ud800"}',  # an escaped backslash, then letters
        '{"text": "plain", "n": [1, 2.5, null]}',
        b'{"text": "\\ud83d\\ude00"}',
    ],
)
def test_text_and_pairs_read_as_json_reads_them(text):
    assert client_json.loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"text": "Hi \\ud800 there"}',
        '{"a": {"b": ["x", "\\udfff"]}}',  # deep in a list
        '{"\\udc00": 1}',  # a key
        '{"text": "\\ude00\\ud83d"}',  # a pair in the wrong order is two halves
        b'{"input": "\\uD800"}',  # an HTTP body, upper-case hex
    ],
)
def test_a_lone_surrogate_is_refused(text):
    with pytest.raises(client_json.LoneSurrogate, match="lone UTF-16 surrogate"):
        client_json.loads(text)


def test_every_websocket_protocol_refuses_it_as_bad_json():
    with pytest.raises(ProtocolError) as native:
        decode_text_frame('{"type": "text", "text": "Hi \\ud800", "final": true}')
    with pytest.raises(ProtocolError) as realtime:
        decode_client_event('{"type": "session.update", "session": {"instructions": "\\ud800"}}')
    with pytest.raises(ProtocolError) as twilio:
        decode_twilio_message('{"event": "mark", "streamSid": "\\ud800", "mark": {"name": "x"}}')
    for error in (native, realtime, twilio):
        assert error.value.code is ErrorCode.BAD_JSON
        assert "surrogate" in error.value.message
