"""The OpenAI Realtime event codec (gateway.realtime_protocol / realtime_events), as pure
functions; the shapes are checked against the `openai` package's own pydantic types."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from engine.api import SamplingParams
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
    ResponseCreateEvent,
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
        "ev_1", "tara", None, None, "be brief", 0.7, "inf", {"seed": 3}
    )
    ga = decode(type="session.update", session={"audio": {"output": {"voice": "leo"}}})
    assert ga.voice == "leo"


def test_whole_numbers_written_with_a_fraction_are_integers():
    event = decode(type="session.update", session={"max_output_tokens": 400.0})
    assert event.max_output_tokens == 400 and type(event.max_output_tokens) is int
    cut = decode(type="conversation.item.truncate", item_id="it_1", audio_end_ms=1500.0)
    cut.check()
    assert cut.audio_end_ms == 1500 and type(cut.audio_end_ms) is int
    half = decode(type="conversation.item.truncate", item_id="it_1", audio_end_ms=1500.5)
    with pytest.raises(ProtocolError, match="integer"):
        half.check()


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


@pytest.mark.parametrize(
    "session, field",
    [
        ({"modalities": ["text"]}, "session.modalities"),
        ({"output_modalities": ["text"]}, "session.output_modalities"),
        ({"audio": {"input": {"noise_reduction": {"type": "near_field"}}}}, "noise_reduction"),
        ({"prompt": {"id": "pmpt_1"}}, "session.prompt"),
        ({"model_options": {"exaggeration": 0.8}}, "session.model_options"),
    ],
)
def test_session_fields_no_model_applies_are_refused_by_name(session, field):
    with pytest.raises(ProtocolError) as err:
        decode(type="session.update", session=session)
    assert err.value.code == ErrorCode.BAD_FIELD
    assert field in err.value.message and "not applied" in err.value.message


def test_input_transcription_is_decoded_from_either_dialect_and_checked():
    from gateway.input_transcription import InputTranscription
    from gateway.realtime_protocol import UNSET

    ga = {"audio": {"input": {"transcription": {"model": "whisper-1", "language": "de"}}}}
    event = decode(type="session.update", session=ga)
    assert event.input_transcription == InputTranscription("whisper-1", "de")
    assert event.paths["input_transcription"] == "session.audio.input.transcription"
    beta = {"input_audio_transcription": {"model": "gpt-4o-transcribe", "prompt": "Voxgate"}}
    assert decode(type="session.update", session=beta).input_transcription == (
        InputTranscription("gpt-4o-transcribe", None, "Voxgate")
    )
    off = {"input_audio_transcription": None}
    assert decode(type="session.update", session=off).input_transcription is None
    assert decode(type="session.update", session={}).input_transcription is UNSET
    for bad, param in (
        ({"input_audio_transcription": {}}, "session.input_audio_transcription.model"),
        ({"input_audio_transcription": "whisper-1"}, "session.input_audio_transcription"),
        (
            {"audio": {"input": {"transcription": {"model": "m", "language": "English"}}}},
            "session.audio.input.transcription.language",
        ),
        (
            {"input_audio_transcription": {"model": "m", "prompt": "x" * 1025}},
            "session.input_audio_transcription.prompt",
        ),
    ):
        with pytest.raises(ProtocolError) as err:
            decode(type="session.update", session=bad)
        assert err.value.code == ErrorCode.BAD_FIELD and err.value.param == param


def test_a_text_to_speech_model_refuses_input_transcription():
    wire = _wire()
    update = {"type": "session.update", "session": {"input_audio_transcription": {"model": "m"}}}
    refused = _refused(wire, json.dumps(update))
    assert "takes none" in refused.message
    assert refused.param == "session.input_audio_transcription"


@pytest.mark.parametrize(
    "session, speed",
    [({"audio": {"output": {"speed": 1.25}}}, 1.25), ({"speed": 0.8}, 0.8), ({}, None)],
)
def test_speed_is_decoded_from_either_dialect(session, speed):
    assert decode(type="session.update", session=session).speed == speed


@pytest.mark.parametrize(
    "session, field",
    [
        ({"audio": {"output": {"speed": 4.5}}}, "session.audio.output.speed"),
        ({"speed": 0.1}, "session.speed"),
        ({"speed": "fast"}, "session.speed"),
    ],
)
def test_speed_outside_openais_range_is_refused_by_name(session, field):
    with pytest.raises(ProtocolError) as err:
        decode(type="session.update", session=session)
    assert err.value.code == ErrorCode.BAD_FIELD
    assert f"`{field}`" in err.value.message and "[0.25, 4.0]" in err.value.message


def test_session_fields_that_ask_for_nothing_are_accepted():
    session = {
        "tools": [],
        "tool_choice": "auto",
        "modalities": ["audio", "text"],
        "output_modalities": ["audio"],
        "input_audio_transcription": None,
        "audio": {"input": {"noise_reduction": None}, "output": {"speed": 1.0}},
        "prompt": None,
    }
    assert isinstance(decode(type="session.update", session=session), SessionUpdateEvent)


def test_response_create_decodes_its_response_in_either_dialect():
    """`response`: options for one response, shaped as session.update's (GA nests the voice
    and format under `audio.output`); the values that ask for nothing are accepted."""
    ga = decode(
        type="response.create",
        event_id="ev_1",
        response={
            "audio": {"output": {"voice": "leo", "format": {"type": "audio/pcmu"}}},
            "max_output_tokens": 40,
            "instructions": "Be brief.",
            "metadata": {"turn": "1"},
            "conversation": "auto",
            "output_modalities": ["audio"],
            "tools": [],
            "tool_choice": "auto",
        },
    )
    assert ga == ResponseCreateEvent(
        "ev_1",
        voice="leo",
        max_output_tokens=40,
        instructions="Be brief.",
        output_format=RealtimeFormat.G711_ULAW,
        tools=(),
        tool_choice="auto",
        metadata={"turn": "1"},
    )
    assert ga.paths["voice"] == "response.audio.output.voice"
    assert ga.paths["max_tokens"] == "response.max_output_tokens"
    beta = decode(
        type="response.create",
        response={
            "voice": "tara",
            "temperature": 0.3,
            "max_response_output_tokens": "inf",
            "output_audio_format": "g711_alaw",
            "modalities": ["text", "audio"],
            "metadata": None,
        },
    )
    assert (beta.voice, beta.temperature, beta.max_output_tokens) == ("tara", 0.3, "inf")
    assert beta.output_format is RealtimeFormat.G711_ALAW and beta.metadata is None
    assert beta.paths["voice"] == "response.voice"
    assert beta.paths["max_tokens"] == "response.max_response_output_tokens"
    assert decode(type="response.create") == ResponseCreateEvent(None)
    assert decode(type="response.create", response=None) == ResponseCreateEvent(None)


def test_response_metadata_is_held_to_openais_limits():
    most = {f"k{i:062d}": "v" * 512 for i in range(16)}  # 16 pairs, 64-character keys
    assert decode(type="response.create", response={"metadata": most}).metadata == most
    for metadata in (
        {"k": 1},
        ["k", "v"],
        {f"k{i}": "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
    ):
        with pytest.raises(ProtocolError) as err:
            decode(type="response.create", response={"metadata": metadata})
        assert err.value.code == ErrorCode.BAD_FIELD and err.value.param == "response.metadata"


@pytest.mark.parametrize(
    "response, param, says",
    [
        ({"conversation": "none"}, "response.conversation", "out-of-band"),
        ({"input": []}, "response.input", "context of its own"),
        ({"output_modalities": ["text"]}, "response.output_modalities", "every response is audio"),
        ({"modalities": ["text"]}, "response.modalities", "every response is audio"),
        ({"prompt": {"id": "pmpt_1"}}, "response.prompt", "stored prompts"),
        ({"temperature": "hot"}, "response.temperature", "must be a number"),
        ({"max_output_tokens": 1.5}, "response.max_output_tokens", "integer"),
        ({"max_response_output_tokens": "lots"}, "response.max_response_output_tokens", "inf"),
        ({"audio": {"output": {"voice": 3}}}, "response.audio.output.voice", "string"),
        ({"output_audio_format": "mp3"}, "response.output_audio_format", "g711_ulaw"),
        ({"tools": [{"type": "function", "name": "a b"}]}, "response.tools[0].name", "letters"),
        ({"tool_choice": "required"}, "response.tool_choice", "cannot be honoured"),
        ("fast", "response", "object"),
    ],
)
def test_response_create_refusals_name_the_field(response, param, says):
    with pytest.raises(ProtocolError) as err:
        decode(type="response.create", event_id="ev_1", response=response)
    assert err.value.param == param and says in err.value.message


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


# --- the adapter's mapping (gateway.realtime.RealtimeWire), without a server ------------------
def _wire(
    max_pending_chars: int = 40,
    accepts_audio: bool = False,
    dialect: Dialect = Dialect.GA,
    **facts_fields,
):
    from gateway.realtime import RealtimeWire
    from models.base import ModelFacts

    facts = ModelFacts(
        "tts", 24000, 80.0, (0,), 28, 28, voices=("tara",), default_voice="tara",
        accepts_audio=accepts_audio, **facts_fields,
    )  # fmt: skip
    return RealtimeWire(dialect, facts, None, max_pending_chars=max_pending_chars)


def _spoken(events) -> tuple:
    """The texts of the responses `events` start, where they ask for no options of their own
    (the echo, which carries the messages spoken, aside); anything else as it is."""
    from gateway.protocol import TextInput
    from gateway.response_overrides import ResponseOverrides

    def plain(event) -> bool:
        own = event.overrides
        return own is None or dataclasses.replace(own, echo=None) == ResponseOverrides()

    return tuple(e.text if isinstance(e, TextInput) and plain(e) else e for e in events)


def _item(text: str, role: str = "user") -> str:
    content = [{"type": "input_text", "text": text}]
    return json.dumps({"type": "conversation.item.create",
                       "item": {"type": "message", "role": role, "content": content}})  # fmt: skip


def test_an_item_goes_at_the_end_and_must_name_a_known_previous_item():
    """previous_item_id: any item the conversation has, or "root", is accepted and the item
    goes at the end (nothing is inserted before others); an unknown id is refused and the
    item not kept."""
    wire = _wire()
    first = json.loads(_item("One."))
    first["previous_item_id"] = "root"
    (reply,) = wire.decode_text(json.dumps(first))
    one = json.loads(reply.text)["item"]["id"]
    wire.decode_text(_item("Two."))
    third = json.loads(_item("Three."))
    third["previous_item_id"] = one  # not the newest: still at the end
    wire.decode_text(json.dumps(third))
    for where, says in (("item_nope", "no item 'item_nope'"), (7, "must be a string")):
        fourth = json.loads(_item("Four."))
        fourth["previous_item_id"] = where
        refused = _refused(wire, json.dumps(fourth))
        assert refused.param == "previous_item_id" and says in refused.message
    assert _spoken(wire.decode_text('{"type": "response.create"}')) == ("One. Two. Three.",)


def test_items_are_spoken_by_the_next_response_create():
    from gateway.wire import Reply

    wire = _wire()
    (reply,) = wire.decode_text(_item("One."))
    assert isinstance(reply, Reply)
    assert json.loads(reply.text)["type"] == "conversation.item.created"
    wire.decode_text(_item("Be brief.", role="system"))  # acknowledged, not spoken
    wire.decode_text(_item("Two."))
    assert _spoken(wire.decode_text('{"type": "response.create"}')) == ("One. Two.",)
    with pytest.raises(ProtocolError):  # nothing new to speak
        wire.decode_text('{"type": "response.create"}')


def test_kept_text_is_bounded():
    wire = _wire(max_pending_chars=40)
    wire.decode_text(_item("x" * 30))
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(_item("y" * 11))
    assert err.value.code == ErrorCode.TOO_LARGE


def test_audio_events_need_a_speech_to_speech_model():
    from gateway.protocol import AudioInput, InputCommit

    audio = base64.b64encode(b"\x00\x00").decode()
    append = json.dumps({"type": "input_audio_buffer.append", "audio": audio})
    with pytest.raises(ProtocolError) as err:
        _wire().decode_text(append)
    assert err.value.code == ErrorCode.UNSUPPORTED_INPUT and "speech-to-speech" in err.value.message
    s2s = _wire(accepts_audio=True)  # handed to the session, which owns the audio path
    assert s2s.decode_text(append) == (AudioInput(b"\x00\x00"),)
    assert s2s.decode_text('{"type": "input_audio_buffer.commit"}') == (InputCommit(),)


def test_an_append_becomes_frames_the_session_takes():
    from gateway.realtime_inbound import audio_frames

    audio = bytes(range(256)) * 100  # 25,600 bytes
    frames = audio_frames(audio, 1001)  # an odd limit: frames of 1000, whole pcm16 samples
    assert all(len(f.data) == 1000 for f in frames[:-1]) and len(frames[-1].data) == 600
    assert b"".join(f.data for f in frames) == audio
    assert audio_frames(b"", 1000) == ()


def _vad_update(**fields) -> str:
    vad = {"type": "server_vad", **fields}
    session = {"type": "realtime", "audio": {"input": {"turn_detection": vad}}}
    return json.dumps({"type": "session.update", "session": session})


def test_max_tokens_inf_is_the_models_default_whatever_the_session_had():
    from gateway.wire import SessionUpdate

    wire = _wire()
    for sent, budget in ((60, 60), ("inf", 1200)):
        update = {"type": "session.update", "session": {"max_output_tokens": sent}}
        (taken,) = wire.decode_text(json.dumps(update))
        assert isinstance(taken, SessionUpdate) and taken.sampling["max_tokens"] == budget
        assert taken.param_paths["max_tokens"] == "session.max_output_tokens"


def test_turn_detection_response_flags_reach_the_session():
    from gateway.protocol import TurnDetection, TurnDetectionType
    from gateway.wire import SessionUpdate

    wire = _wire(accepts_audio=True, accepts_turns=True)
    (update,) = wire.decode_text(_vad_update(create_response=False, interrupt_response=False))
    assert isinstance(update, SessionUpdate)
    assert update.turn_detection == TurnDetection(
        TurnDetectionType.VAD, 500, create_response=False, interrupt_response=False
    )
    shown = update.echo[0]  # what session.updated shows
    assert shown["create_response"] is False and shown["interrupt_response"] is False
    (update,) = wire.decode_text(_vad_update())  # left out: OpenAI's defaults
    assert update.turn_detection == TurnDetection(TurnDetectionType.VAD, 500)
    for value in ("false", 0, []):  # only true and false
        with pytest.raises(ProtocolError) as err:
            wire.decode_text(_vad_update(interrupt_response=value))
        assert err.value.code == ErrorCode.BAD_FIELD
        assert "turn_detection.interrupt_response" in err.value.message


@pytest.mark.parametrize("field", ["create_response", "interrupt_response"])
def test_a_full_duplex_model_refuses_the_response_flags(field):
    wire = _wire(accepts_audio=True, full_duplex=True)
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(_vad_update(**{field: False}))
    assert err.value.code == ErrorCode.BAD_FIELD and f"turn_detection.{field}" in err.value.message
    assert "full-duplex" in err.value.message
    assert wire.decode_text(_vad_update(**{field: True}))  # what it does anyway


def test_response_create_asks_the_conversation_for_its_held_turns():
    """The wire keeps no count of held turns: response.create with nothing else to answer asks
    the conversation (gateway/held_turns.py), which answers the turns it holds or refuses;
    only the one response.create after a turn the server answers itself is consumed here."""
    from gateway.wire import AnswerTurns, InputCommitted

    wire = _wire(accepts_audio=True, accepts_turns=True)
    assert wire.decode_text('{"type": "response.create"}') == (AnswerTurns(),)
    wire.encode_event(InputCommitted(800, answered=False))
    assert wire.decode_text('{"type": "response.create"}') == (AnswerTurns(),)
    # A turn the server answers itself: the response.create that follows asks for that answer.
    wire.encode_event(InputCommitted(800))
    assert wire.decode_text('{"type": "response.create"}') == ()
    assert wire.decode_text('{"type": "response.create"}') == (AnswerTurns(),)  # asks anew
    # A text-to-speech model has no turns: nothing to speak is the client's error at once.
    with pytest.raises(ProtocolError) as err:
        _wire(accepts_audio=False).decode_text('{"type": "response.create"}')
    assert "nothing to speak" in err.value.message


def test_turn_detection_null_holds_committed_turns_for_response_create():
    """Manual turns: OpenAI's commit starts no response, so the session holds each one."""
    from gateway.protocol import TurnDetection, TurnDetectionType

    off = json.dumps({"type": "session.update", "session": {"turn_detection": None}})
    (update,) = _wire(accepts_audio=True, accepts_turns=True).decode_text(off)
    assert update.turn_detection == TurnDetection(TurnDetectionType.NONE, create_response=False)
    assert update.echo[0] is None  # session.updated shows turn detection off
    # A full-duplex model has no turns to hold: null is taken, as before.
    assert _wire(accepts_audio=True, full_duplex=True).decode_text(off)


@pytest.mark.parametrize(
    "event, param",
    [
        ({"type": "response.explode"}, "type"),
        ({"type": "session.update", "session": {"temperature": "hot"}}, "session.temperature"),
        ({"type": "session.update", "session": {"max_response_output_tokens": 1.5}},
         "session.max_response_output_tokens"),
        ({"type": "session.update", "session": {"audio": {"output": {"speed": 9}}}},
         "session.audio.output.speed"),
        ({"type": "session.update", "session": {"output_audio_format": "mp3"}},
         "session.output_audio_format"),
        ({"type": "session.update", "session": {"output_modalities": ["text"]}},
         "session.output_modalities"),
        ({"type": "session.update", "session": {"tools": [{"type": "function", "name": "a b"}]}},
         "session.tools[0].name"),
        ({"type": "conversation.item.create", "item": {"role": "robot", "content": []}},
         "item.role"),
        ({"type": "conversation.item.create",
          "item": {"role": "user", "content": [{"type": "input_text", "text": 3}]}},
         "item.content[0].text"),
        ({"type": "input_audio_buffer.append", "audio": "not base64!"}, "audio"),
    ],
)  # fmt: skip
def test_refusals_name_the_offending_field_as_param(event, param):
    """OpenAI's `error.param`: the field's path from the event's root, as the client sent it."""
    with pytest.raises(ProtocolError) as err:
        decode(**event)
    assert err.value.param == param


def test_turn_detection_refusals_name_the_field_where_the_client_put_it():
    beta = {"turn_detection": {"type": "server_vad", "create_response": "no"}}
    ga = {"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 0.9}}}}
    wire = _wire(accepts_audio=True, accepts_turns=True)
    for session, param in (
        (beta, "session.turn_detection.create_response"),
        (ga, "session.audio.input.turn_detection.threshold"),
    ):
        with pytest.raises(ProtocolError) as err:
            wire.decode_text(json.dumps({"type": "session.update", "session": session}))
        assert err.value.code == ErrorCode.BAD_FIELD and err.value.param == param


def test_the_error_event_carries_param_and_the_native_one_does_not():
    from gateway.protocol import ErrorEvent, encode_event

    wire = _wire()
    update = {"type": "session.update", "event_id": "ev_3", "session": {"voice": "alloy"}}
    wire.decode_text(json.dumps(update))  # the session refuses the voice while handling it
    (out,) = wire.encode_event(ErrorEvent(ErrorCode.BAD_FIELD, "no", param="session.voice"))
    parsed = openai_types.RealtimeErrorEvent.model_validate_json(out.text)
    assert parsed.error.param == "session.voice" and parsed.error.event_id == "ev_3"
    native = json.loads(encode_event(ErrorEvent(ErrorCode.BAD_FIELD, "no", param="x")))
    assert native == {"type": "error", "code": "bad_field", "message": "no", "fatal": False}


@pytest.mark.parametrize("dialect", [Dialect.GA, Dialect.BETA])
def test_audio_without_a_transcript_has_an_empty_one_and_user_audio_a_null_one(dialect):
    """OpenAI's assistant audio parts always carry a string transcript (the transcript's
    `done` event too); a user's audio item has null while nothing transcribes it."""
    from gateway.realtime_events import encode_response_started, encode_user_audio_item

    out = OutputItem("resp_1", "item_1")
    started = [json.loads(e) for e in encode_response_started(dialect, out, None)]
    assert started[1]["item"]["content"] == [] == started[2]["item"]["content"]  # in progress
    assert started[3]["part"]["transcript"] == ""
    prefix = "response.audio" if dialect is Dialect.BETA else "response.output_audio"
    for outcome in (ResponseOutcome("completed"), ResponseOutcome("cancelled", "client_cancelled")):
        done = {e["type"]: e for e in map(json.loads, encode_response_done(dialect, out, outcome))}
        assert done[prefix + "_transcript.done"]["transcript"] == ""
        assert done["response.content_part.done"]["part"]["transcript"] == ""
        assert done["response.output_item.done"]["item"]["content"][0]["transcript"] == ""
        assert done["response.done"]["response"]["output"][0]["content"][0]["transcript"] == ""
    user = json.loads(encode_user_audio_item("item_2", None))
    assert user["item"]["content"] == [{"type": "input_audio", "transcript": None}]


# --- response.create's own options (gateway.realtime_inbound → ResponseOverrides)
def _create(**response) -> str:
    return json.dumps({"type": "response.create", "event_id": "ev_r", "response": response})


def test_response_options_ride_with_the_text_they_answer_and_apply_to_it_only():
    from gateway.protocol import TextInput
    from gateway.realtime_state import ResponseEcho
    from gateway.reply import SpeechOptions
    from gateway.response_overrides import ResponseOverrides

    wire = _wire()
    one = json.loads(wire.decode_text(_item("One."))[0].text)["item"]["id"]
    ga = {"voice": "leo", "format": {"type": "audio/pcm"}}  # the session's format: a no-op
    (text,) = wire.decode_text(
        _create(audio={"output": ga}, max_output_tokens=20, metadata={"k": "v"}, instructions="")
    )
    assert isinstance(text, TextInput) and text.text == "One."
    echo = ResponseEcho({"k": "v"}, (one,))  # metadata, and the message it speaks
    assert text.overrides == ResponseOverrides("leo", {"max_tokens": 20}, None, echo)
    assert text.overrides.param_paths["voice"] == "response.audio.output.voice"
    session = SpeechOptions(voice="tara", instructions="Be kind.")
    own = text.overrides.over(session)
    assert (own.voice, own.sampling.max_tokens, own.instructions) == ("leo", 20, "Be kind.")
    assert own.sampling.temperature == session.sampling.temperature
    # "inf": the model's own budget; metadata alone is an override too (it is echoed).
    wire.decode_text(_item("Two."))
    (text,) = wire.decode_text(_create(max_response_output_tokens="inf", temperature=0.2))
    assert text.overrides.sampling == {"max_tokens": 1200, "temperature": 0.2}
    wire.decode_text(_item("Three."))
    assert _spoken(wire.decode_text(_create(metadata=None, conversation="auto"))) == ("Three.",)
    # A session's min_tokens is capped at a smaller budget rather than refusing to start.
    capped = ResponseOverrides(sampling={"max_tokens": 5}).over(
        SpeechOptions(sampling=SamplingParams(min_tokens=10))
    )
    assert (capped.sampling.max_tokens, capped.sampling.min_tokens) == (5, 5)


@pytest.mark.parametrize(
    "response, param",
    [
        ({"instructions": "Be brief."}, "response.instructions"),
        ({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}, "response.audio.output.format"),
        ({"output_audio_format": "g711_alaw"}, "response.output_audio_format"),
        ({"tools": [{"type": "function", "name": "f"}]}, "response.tools"),
        ({"tool_choice": "none"}, "response.tool_choice"),
    ],
)
def test_response_options_unlike_the_sessions_are_refused_and_the_text_waits(response, param):

    wire = _wire()
    wire.decode_text(_item("One."))
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(_create(**response))
    assert err.value.code == ErrorCode.BAD_FIELD and err.value.param == param
    assert "not applied" in err.value.message
    assert _spoken(wire.decode_text('{"type": "response.create"}')) == ("One.",)


def test_a_response_the_session_refuses_leaves_its_text_for_the_next_response_create():
    """The voice and sampling ranges are the session's to check (its key's voices): when it
    refuses them, the text response.create took waits for the next one."""

    wire = _wire()
    wire.decode_text(_item("One."))
    (refused,) = wire.decode_text(_create(voice="alloy"))
    wire.refused(refused)
    wire.decode_text(_item("Two."))
    assert _spoken(wire.decode_text('{"type": "response.create"}')) == ("One. Two.",)


def test_response_options_on_turns_already_in_the_conversation():
    """Held turns (AnswerTurns) take the options; not instructions, which go with a text
    turn; and the answer the server is already giving a committed turn takes none."""
    from gateway.protocol import TextInput
    from gateway.realtime_state import ResponseEcho
    from gateway.response_overrides import ResponseOverrides
    from gateway.wire import AnswerTurns, InputCommitted

    wire = _wire(accepts_audio=True, accepts_turns=True, system_prompt=True)
    (answer,) = wire.decode_text(_create(max_output_tokens=8, metadata={"k": "v"}))
    options = ResponseOverrides(sampling={"max_tokens": 8}, echo=ResponseEcho({"k": "v"}))
    assert answer == AnswerTurns(options, event_id="ev_r")  # the asking event, for its error
    for instructions in ("Be brief.", ""):  # "": the model's default, for this response
        with pytest.raises(ProtocolError) as err:
            wire.decode_text(_create(instructions=instructions))
        assert err.value.param == "response.instructions"
        assert "turns already in the conversation" in err.value.message
    wire.decode_text(_item("Hi."))
    (text,) = wire.decode_text(_create(instructions="Be brief."))
    assert isinstance(text, TextInput) and text.overrides.instructions == "Be brief."
    # A turn the server answers: the response.create after it asks for that answer, which
    # has the session's options; it is refused and still asks for it afterwards.
    wire.encode_event(InputCommitted(800))
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(_create(voice="tara", metadata={"k": "v"}))
    assert err.value.param == "response.voice" and "create_response" in err.value.message
    assert wire.decode_text(_create(metadata=None)) == ()


@pytest.mark.parametrize("dialect", [Dialect.GA, Dialect.BETA])
def test_a_responses_resource_shows_its_own_options_else_the_sessions(dialect):
    from gateway.config import GatewaySettings
    from gateway.protocol import (
        ResponseDone,
        ResponseStarted,
        ResponseStatus,
        SessionStarted,
    )
    from gateway.realtime_state import SPECS
    from gateway.reply import SpeechOptions

    wire = _wire(dialect=dialect)
    types = openai_types if dialect is Dialect.GA else beta_types
    limits = GatewaySettings().limits()
    pcm = SPECS[RealtimeFormat.PCM16]
    (created,) = wire.encode_event(SessionStarted("s1", "tts", None, pcm, limits))
    session = json.loads(created.text)["session"]  # the model's defaults, shown at the start
    wire.decode_text(_item("One."))
    (own,) = wire.decode_text(_create(voice="leo", temperature=0.0, max_output_tokens=20))
    # As the session starts the response: its own options over the session's; then a reply
    # with no options of its own (a full-duplex model's).
    runs_with = own.overrides.over(SpeechOptions(voice="tara"))
    shown = []
    for echo, options in ((own.overrides.echo, runs_with), (None, None)):
        started = wire.encode_event(ResponseStarted("resp_1", echo, options))
        done = wire.encode_event(ResponseDone("resp_1", ResponseStatus.COMPLETED, 0, None))
        for event in (started[0], done[-1]):
            parsed = types.ResponseCreatedEvent if event is started[0] else types.ResponseDoneEvent
            response = parsed.model_validate_json(event.text).response
            if dialect is Dialect.GA:
                shown.append((response.audio.output.voice, response.max_output_tokens))
            else:
                shown.append((response.voice, response.max_output_tokens, response.temperature))
    if dialect is Dialect.GA:
        assert shown == [("leo", 20)] * 2 + [("tara", session["max_output_tokens"])] * 2
    else:
        theirs = ("tara", session["max_response_output_tokens"], session["temperature"])
        assert shown == [("leo", 20, 0.0)] * 2 + [theirs] * 2
    assert session["max_output_tokens" if dialect is Dialect.GA else "temperature"] not in (20, 0.0)


def test_a_full_duplex_model_refuses_response_options():
    wire = _wire(accepts_audio=True, full_duplex=True)
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(_create(metadata={"k": "v"}))
    assert err.value.param == "response.metadata" and "full-duplex" in err.value.message


@pytest.mark.parametrize("dialect", [Dialect.GA, Dialect.BETA])
def test_metadata_is_echoed_in_its_responses_created_and_done(dialect):
    from gateway.protocol import ResponseDone, ResponseStarted, ResponseStatus, encode_event
    from gateway.realtime_state import ResponseEcho

    wire = _wire(dialect=dialect)
    types = openai_types if dialect is Dialect.GA else beta_types
    seen = []
    for echo in (ResponseEcho({"k": "v"}), None):
        started = wire.encode_event(ResponseStarted("resp_1", echo))
        done = wire.encode_event(ResponseDone("resp_1", ResponseStatus.COMPLETED, 0, None))
        created = types.ResponseCreatedEvent.model_validate_json(started[0].text)
        finished = types.ResponseDoneEvent.model_validate_json(done[-1].text)
        seen.append((created.response.metadata, finished.response.metadata))
    assert seen == [({"k": "v"}, {"k": "v"}), (None, None)]
    assert json.loads(encode_event(ResponseStarted("r", {"k": "v"}))) == {
        "type": "response.started",
        "response_id": "r",
    }


def _ref(kind: str, item_id: object) -> str:
    return json.dumps({"type": f"conversation.item.{kind}", "item_id": item_id})


def _refused(wire, text: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as err:
        wire.decode_text(text)
    return err.value


def test_retrieve_and_delete_decode_with_their_item_id():
    from gateway.realtime_protocol import ItemRefEvent

    assert decode(type="conversation.item.delete", event_id="e", item_id="i") == ItemRefEvent(
        "e", "conversation.item.delete", "i"
    )
    for item_id in (None, "", 3):
        err = _refused(_wire(), _ref("retrieve", item_id))
        assert (err.code, err.param) == (ErrorCode.BAD_FIELD, "item_id")


@pytest.mark.parametrize("dialect", [Dialect.GA, Dialect.BETA])
def test_retrieve_shows_an_item_and_delete_drops_a_waiting_message(dialect):
    from gateway.protocol import ResponseDone, ResponseStarted, ResponseStatus

    wire = _wire(dialect=dialect)
    server = openai_types if dialect is Dialect.GA else beta_types
    events = server.realtime_server_event
    first = json.loads(wire.decode_text(_item("One."))[0].text)["item"]["id"]
    second = json.loads(wire.decode_text(_item("Two."))[0].text)["item"]
    (got,) = wire.decode_text(_ref("retrieve", second["id"]))
    retrieved = events.ConversationItemRetrieved.model_validate_json(got.text)
    assert json.loads(got.text)["item"] == second and retrieved.item.content[0].text == "Two."
    (gone,) = wire.decode_text(_ref("delete", first))
    assert server.ConversationItemDeletedEvent.model_validate_json(gone.text).item_id == first
    err = _refused(wire, _ref("retrieve", first))  # forgotten
    assert (err.code, err.param) == (ErrorCode.BAD_FIELD, "item_id")
    assert first in err.message and "from their creation on" in err.message
    assert _spoken(wire.decode_text('{"type": "response.create"}')) == ("Two.",)
    # The response's item is remembered as shown, and cannot be deleted while it plays.
    started = wire.encode_event(ResponseStarted("resp_1"))
    reply = json.loads(started[1].text)["item"]["id"]
    for item_id in (reply, second["id"]):
        assert "response.cancel" in _refused(wire, _ref("delete", item_id)).message
    wire.encode_event(ResponseDone("resp_1", ResponseStatus.COMPLETED, 0, None))
    (got,) = wire.decode_text(_ref("retrieve", reply))
    assert json.loads(got.text)["item"]["status"] == "completed"
    assert wire.decode_text(_ref("delete", reply))  # spoken: simply forgotten
    assert "response.create" not in _refused(wire, _ref("delete", reply)).message


def test_delete_refuses_a_queued_responses_messages_until_its_own_response_done():
    """Responses queue: the first one's response.done frees only its own items."""
    from gateway.protocol import ResponseDone, ResponseStarted, ResponseStatus

    wire = _wire()
    ids, asked = [], []
    for text in ("One.", "Two."):
        ids.append(json.loads(wire.decode_text(_item(text))[0].text)["item"]["id"])
        (created,) = wire.decode_text(_create(metadata={"n": text}))
        asked.append(created.overrides.echo)
    assert [echo.items for echo in asked] == [(ids[0],), (ids[1],)]
    for n, echo in enumerate(asked):
        wire.encode_event(ResponseStarted(f"resp_{n}", echo))
        wire.encode_event(ResponseDone(f"resp_{n}", ResponseStatus.COMPLETED, 0, None))
        if n == 0:
            assert "response.cancel" in _refused(wire, _ref("delete", ids[1])).message
    assert all(wire.decode_text(_ref("delete", item_id)) for item_id in ids)


def test_remembered_items_are_bounded_oldest_first():
    from gateway.realtime_events import encode_item_created
    from gateway.realtime_state import ConversationItems

    items = ConversationItems(limit=2)
    for item_id in ("a", "b", "c"):
        items.note(encode_item_created(Dialect.GA, item_id, "user", "Hi.", None))
    assert items.get("a") is None and items.newest == "c"
    assert items.get("c")["id"] == "c" and items.get("c")["content"][0]["text"] == "Hi."
    # Text that is not an item-showing event shows none, whatever it holds.
    items.note('{"type":"conversation.item.retrieved","item":{"id":"d"}}')
    items.note('{"item": {"id": "e"}}')
    assert items.get("d") is None and items.get("e") is None


def test_a_turn_models_items_are_deleted_by_the_turns_they_are_part_of():
    """A message waiting for response.create is dropped at once; an item in the model's
    conversation asks the conversation to take its turn out (ForgetTurn), and the turn's
    TurnForgotten deletes each of its items: the messages one response.create spoke together
    go together. Full-duplex models refuse delete outright."""
    from gateway.protocol import ResponseDone, ResponseStarted, ResponseStatus
    from gateway.wire import ForgetTurn, InputCommitted, TurnForgotten

    wire = _wire(accepts_audio=True, accepts_turns=True)
    waiting = json.loads(wire.decode_text(_item("Skip this."))[0].text)["item"]["id"]
    assert wire.decode_text(_ref("delete", waiting))
    kept = [json.loads(wire.decode_text(_item(t))[0].text)["item"]["id"] for t in ("Hi.", "Yo.")]
    (created,) = wire.decode_text('{"type": "response.create"}')
    assert _spoken([created]) == ("Hi. Yo.",) and created.turn_id
    started = wire.encode_event(ResponseStarted("resp_1", created.overrides.echo))
    reply_item = json.loads(started[1].text)["item"]["id"]
    wire.encode_event(ResponseDone("resp_1", ResponseStatus.COMPLETED, 0, None))
    assert wire.decode_text(_ref("delete", kept[1])) == (ForgetTurn(created.turn_id),)
    assert wire.decode_text(_ref("delete", reply_item)) == (ForgetTurn("resp_1"),)
    deleted = [json.loads(out.text) for out in wire.encode_event(TurnForgotten(created.turn_id))]
    assert [(d["type"], d["item_id"]) for d in deleted] == [
        ("conversation.item.deleted", kept[0]),
        ("conversation.item.deleted", kept[1]),
    ]
    assert "no item" in _refused(wire, _ref("retrieve", kept[0])).message
    # A committed audio turn's item is its turn's, by the id the commit carried.
    committed = wire.encode_event(InputCommitted(800, turn_id="turn_a"))
    audio_item = json.loads(committed[0].text)["item_id"]
    assert wire.decode_text(_ref("delete", audio_item)) == (ForgetTurn("turn_a"),)
    duplex = _wire(accepts_audio=True, full_duplex=True)
    assert "full-duplex" in _refused(duplex, _ref("delete", "x")).message
