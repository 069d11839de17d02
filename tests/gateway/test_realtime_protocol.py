"""The OpenAI Realtime event codec (gateway.realtime_protocol / realtime_events), as pure
functions; the shapes are checked against the `openai` package's own pydantic types."""

from __future__ import annotations

import base64
import json

import pytest

from gateway.protocol import ErrorCode, ProtocolError
from gateway.realtime_events import (
    OutputItem,
    ResponseOutcome,
    SessionView,
    encode_audio_delta,
    encode_error,
    encode_response_done,
    encode_session,
)
from gateway.realtime_protocol import (
    UNSET,
    AudioInputEvent,
    Dialect,
    ItemCreateEvent,
    RealtimeFormat,
    SessionUpdateEvent,
    decode_client_event,
)

openai_types = pytest.importorskip("openai.types.realtime")
beta_types = pytest.importorskip("openai.types.beta.realtime")


def decode(**event) -> object:
    return decode_client_event(json.dumps(event))


@pytest.mark.parametrize(
    "session, fmt",
    [
        ({"output_audio_format": "g711_alaw"}, RealtimeFormat.G711_ALAW),
        ({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}, RealtimeFormat.G711_ULAW),
        ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}}}}, "pcm16"),
        ({}, None),
    ],
)
def test_session_update_formats_in_both_dialects(session, fmt):
    event = decode(type="session.update", session=session)
    assert isinstance(event, SessionUpdateEvent)
    assert event.output_format == fmt
    assert event.turn_detection is UNSET


def test_session_update_fields():
    event = decode(
        type="session.update",
        event_id="ev_1",
        session={
            "voice": "tara",
            "turn_detection": None,
            "instructions": "be brief",
            "temperature": 0.7,
            "max_response_output_tokens": "inf",
            "sampling": {"seed": 3},
        },
    )
    assert event == SessionUpdateEvent(
        "ev_1", "tara", None, None, "be brief", 0.7, None, {"seed": 3}
    )
    ga = decode(type="session.update", session={"audio": {"output": {"voice": "leo"}}})
    assert ga.voice == "leo"


@pytest.mark.parametrize(
    "session, code",
    [
        ({"output_audio_format": "mp3"}, ErrorCode.UNSUPPORTED_AUDIO),
        ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "bad_field"),
        ({"temperature": "hot"}, ErrorCode.BAD_FIELD),
        ({"max_output_tokens": 1.5}, ErrorCode.BAD_FIELD),
        ({"turn_detection": "server_vad"}, ErrorCode.BAD_FIELD),
    ],
)
def test_bad_session_updates(session, code):
    with pytest.raises(ProtocolError) as err:
        decode(type="session.update", session=session)
    assert err.value.code == code


def test_item_create_joins_text_parts_and_refuses_audio_parts():
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "One."}, {"type": "input_text", "text": "Two."}],
    }
    assert decode(type="conversation.item.create", item=item) == ItemCreateEvent(
        None, None, "user", "One. Two."
    )
    item["content"] = [{"type": "input_audio", "audio": ""}]
    with pytest.raises(ProtocolError) as err:
        decode(type="conversation.item.create", item=item)
    assert err.value.code == ErrorCode.UNSUPPORTED_INPUT


def test_audio_append_decodes_base64_and_refuses_garbage():
    audio = base64.b64encode(b"\x01\x02").decode()
    event = decode(type="input_audio_buffer.append", audio=audio)
    assert event == AudioInputEvent(None, "input_audio_buffer.append", b"\x01\x02")
    with pytest.raises(ProtocolError):
        decode(type="input_audio_buffer.append", audio="not base64!")


def _view(fmt: RealtimeFormat = RealtimeFormat.G711_ULAW) -> SessionView:
    return SessionView("sess_1", "tiny-orpheus", "tara", fmt, None, None, "", 0.6, 1200)


def test_session_events_parse_as_the_sdk_types():
    ga = openai_types.SessionUpdatedEvent.model_validate_json(
        encode_session("session.updated", Dialect.GA, _view())
    )
    assert ga.session.audio.output.format.type == "audio/pcmu"
    assert ga.session.audio.output.voice == "tara"
    # The beta type lists OpenAI's model names as literals (the SDK parses without validating,
    # so any name reaches the client): validate everything else.
    body = json.loads(encode_session("session.created", Dialect.BETA, _view()))
    assert body["session"].pop("model") == "tiny-orpheus"
    beta = beta_types.SessionCreatedEvent.model_validate(body)
    assert beta.session.output_audio_format == "g711_ulaw"
    assert beta.session.max_response_output_tokens == 1200


def test_audio_and_done_events_parse_as_the_sdk_types():
    out = OutputItem("resp_1", "item_1")
    ga = openai_types.ResponseAudioDeltaEvent.model_validate_json(
        encode_audio_delta(Dialect.GA, out, b"\x00\x01")
    )
    assert base64.b64decode(ga.delta) == b"\x00\x01" and ga.item_id == "item_1"
    beta = beta_types.ResponseAudioDeltaEvent.model_validate_json(
        encode_audio_delta(Dialect.BETA, out, b"\x02")
    )
    assert beta.type == "response.audio.delta"
    outcome = ResponseOutcome("cancelled", "client_cancelled")
    *_, done = encode_response_done(Dialect.GA, out, outcome)
    parsed = openai_types.ResponseDoneEvent.model_validate_json(done)
    assert parsed.response.status == "cancelled"
    assert parsed.response.status_details.reason == "client_cancelled"
    assert parsed.response.output[0].id == "item_1"


def test_error_event_parses_as_the_sdk_type():
    text = encode_error("invalid_request_error", "bad_field", "no", "ev_7")
    parsed = openai_types.RealtimeErrorEvent.model_validate_json(text)
    assert parsed.error.event_id == "ev_7" and parsed.error.code == "bad_field"
