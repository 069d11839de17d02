"""Pure encode/decode of the native protocol (no server)."""

from __future__ import annotations

import json

import pytest

from gateway.protocol import (
    AudioFormat,
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    Limits,
    Playback,
    ProtocolError,
    ResponseCancel,
    ResponseDone,
    ResponseStatus,
    ResponseWords,
    SessionEnd,
    SessionStart,
    SessionStarted,
    SpokenWord,
    TextInput,
    decode_text_frame,
    encode_event,
)
from gateway.response_overrides import ResponseOverrides


def decode(obj) -> object:
    return decode_text_frame(json.dumps(obj))


def test_session_start_defaults_and_fields():
    assert decode({"type": "session.start"}) == SessionStart()
    start = decode(
        {
            "type": "session.start",
            "voice": "tara",
            "output_audio": {"format": "pcm16", "sample_rate": 16000, "frame_ms": 40},
            "sampling": {"temperature": 0, "max_tokens": 80, "seed": 3},
        }
    )
    assert start.voice == "tara"
    assert start.output_audio == AudioSpec(AudioFormat.PCM16, 16000, 40)
    assert start.sampling == {"temperature": 0.0, "max_tokens": 80, "seed": 3}


def test_audio_defaults_per_format():
    assert decode(
        {"type": "session.start", "output_audio": {"format": "mulaw"}}
    ).output_audio == AudioSpec(AudioFormat.MULAW, 8000, 20)
    assert decode({"type": "session.start", "output_audio": {}}).output_audio == AudioSpec()


def test_client_events():
    assert decode({"type": "text", "text": "hi"}) == TextInput("hi", True)
    assert decode({"type": "text", "text": "hi", "final": False}) == TextInput("hi", False)
    assert decode({"type": "response.cancel"}) == ResponseCancel()
    assert decode({"type": "playback", "played_ms": 120}) == Playback(120.0)
    assert decode({"type": "session.end", "extra": 1}) == SessionEnd()  # unknown fields ignored


@pytest.mark.parametrize(
    "frame, code",
    [
        ("{not json", ErrorCode.BAD_JSON),
        ("[1, 2]", ErrorCode.BAD_JSON),
        ('{"type": "text", "text": NaN}', ErrorCode.BAD_JSON),
        ('{"text": "hi"}', ErrorCode.BAD_FIELD),
        ('{"type": 7}', ErrorCode.BAD_FIELD),
        ('{"type": "speak"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "text"}', ErrorCode.BAD_FIELD),
        ('{"type": "text", "text": 5}', ErrorCode.BAD_FIELD),
        ('{"type": "text", "text": "a", "final": "yes"}', ErrorCode.BAD_FIELD),
        ('{"type": "playback", "played_ms": -1}', ErrorCode.BAD_FIELD),
        ('{"type": "playback", "played_ms": true}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "voice": 3}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "sampling": {"temprature": 1}}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "sampling": {"max_tokens": 1.5}}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "sampling": []}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "output_audio": "opus"}', ErrorCode.BAD_FIELD),
        (
            '{"type": "session.start", "output_audio": {"format": "mp3"}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        (  # A-law is served to compatibility endpoints only, not part of v1
            '{"type": "session.start", "output_audio": {"format": "alaw"}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        (
            '{"type": "session.start", "output_audio": {"format": "opus", "sample_rate": 16000}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        (
            '{"type": "session.start", "output_audio": {"format": "pcm16", "sample_rate": 22050}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        (
            '{"type": "session.start", "output_audio": {"format": "opus", "frame_ms": 25}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        (
            '{"type": "session.start", "input_audio": {"format": "mulaw", "sample_rate": 16000}}',
            ErrorCode.UNSUPPORTED_AUDIO,
        ),
        ('{"type": "session.start", "turn_detection": {"type": "push"}}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "model_options": [1]}', ErrorCode.BAD_FIELD),
        ('{"type": "text", "text": "hi", "model_options": "loud"}', ErrorCode.BAD_FIELD),
        ('{"type": "session.start", "sampling": {"min_p": "high"}}', ErrorCode.BAD_FIELD),
    ],
)
def test_malformed_frames(frame, code):
    with pytest.raises(ProtocolError) as info:
        decode_text_frame(frame)
    assert info.value.code is code
    assert info.value.message


@pytest.mark.parametrize(
    "frame, says",
    [
        ('{"type": "session.start", "sampling": {"max_tokens": 1.5}}', "must be an integer"),
        ('{"type": "session.start", "sampling": {"seed": "7"}}', "must be an integer"),
        ('{"type": "session.start", "sampling": {"top_p": "high"}}', "must be a number"),
        ('{"type": "session.start", "voice": 3}', "`voice` must be a string"),
        ('{"type": "text", "text": "a", "final": "yes"}', "`final` must be true or false"),
    ],
)
def test_a_wrong_type_is_named_as_json_names_it(frame, says):
    """A client reads the message: it names the JSON type the field takes, never a Python
    class (`int`, `str`)."""
    with pytest.raises(ProtocolError) as info:
        decode_text_frame(frame)
    assert says in info.value.message


def test_a_whole_number_written_with_a_fraction_is_an_integer():
    """JSON has one number type: 100.0 is the integer 100 (as JSON Schema's "integer" reads it,
    and as encoders that write every number as a float send it); 100.5 and true are not."""
    start = decode_text_frame(
        json.dumps(
            {
                "type": "session.start",
                "sampling": {"max_tokens": 100.0, "seed": 7.0},
                "output_audio": {"format": "pcm16", "sample_rate": 24000.0, "frame_ms": 20.0},
                "turn_detection": {"type": "vad", "silence_ms": 500.0},
            }
        )
    )
    assert start.sampling == {"max_tokens": 100, "seed": 7}
    assert all(type(v) is int for v in start.sampling.values())
    assert (start.output_audio.sample_rate, start.output_audio.frame_ms) == (24000, 20)
    assert type(start.output_audio.sample_rate) is int
    assert start.turn_detection.silence_ms == 500
    for bad in (100.5, True, "100"):
        with pytest.raises(ProtocolError, match="must be an integer"):
            decode_text_frame(json.dumps({"type": "session.start", "sampling": {"seed": bad}}))


def test_encode_events():
    limits = Limits(1, 2, 3, 4, 5, 6, 7, 8, 9)
    started = json.loads(
        encode_event(SessionStarted("s1", "tiny", None, AudioSpec(), limits, token_rate_hz=25.0))
    )
    assert started == {
        "type": "session.started",
        "session_id": "s1",
        "model": "tiny",
        "input_audio": None,
        "output_audio": {"format": "opus", "sample_rate": 48000, "frame_ms": 20},
        "limits": {
            "max_text_chars": 1,
            "max_response_text_chars": 2,
            "max_frame_bytes": 3,
            "max_message_bytes": 4,
            "max_queued_responses": 5,
            "start_timeout_ms": 6,
            "idle_timeout_ms": 7,
            "lead_ms": 8,
            "max_send_queue_ms": 9,
        },
        "model_kind": "tts",
        "token_rate_hz": 25.0,
        "model_options": [],  # the model takes no per-request options
        "word_timings": False,
    }
    done = json.loads(encode_event(ResponseDone("r1", ResponseStatus.CANCELLED, 400, None)))
    assert done == {
        "type": "response.done",
        "response_id": "r1",
        "status": "cancelled",
        "audio_ms": 400,
        "ttfa_ms": None,
    }
    # The optional word-timing extension: heard_words only where it has a value.
    heard = (SpokenWord("hello", 0, 320),)
    cut = json.loads(encode_event(ResponseDone("r1", ResponseStatus.CANCELLED, 400, 90, heard)))
    assert cut["heard_words"] == [{"word": "hello", "start_ms": 0, "end_ms": 320}]
    words = json.loads(encode_event(ResponseWords("r1", heard + (SpokenWord("there", 320, 600),))))
    assert words == {
        "type": "response.words",
        "response_id": "r1",
        "words": [
            {"word": "hello", "start_ms": 0, "end_ms": 320},
            {"word": "there", "start_ms": 320, "end_ms": 600},
        ],
    }
    error = json.loads(encode_event(ErrorEvent(ErrorCode.TOO_LARGE, "big", True)))
    assert error == {"type": "error", "code": "too_large", "message": "big", "fatal": True}


def test_model_options_decode_as_given():
    """Their names and values are the served model's to check (gateway/session_start.py); a
    text's are the options of the response it opens."""
    start = decode_text_frame('{"type": "session.start", "model_options": {"exaggeration": 0.7}}')
    assert start.model_options == {"exaggeration": 0.7}
    assert decode_text_frame('{"type": "session.start"}').model_options == {}
    text = decode_text_frame('{"type": "text", "text": "hi", "model_options": {"cfg_weight": 0}}')
    assert text.overrides == ResponseOverrides(model_options={"cfg_weight": 0})
    assert decode_text_frame('{"type": "text", "text": "hi"}').overrides is None
