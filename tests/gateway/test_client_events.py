"""voxgate.client reads what the server writes: each server event, encoded by the gateway's own
protocol module, parses into its typed value; error and close codes map to their classes."""

from __future__ import annotations

import pytest

from gateway.protocol import (
    AudioSpec,
    CloseCode,
    EndReason,
    ErrorCode,
    ErrorEvent,
    InputTranscript,
    Limits,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
    ResponseWords,
    SessionEnded,
    SessionStarted,
    SpeechStarted,
    SpokenWord,
    TranscriptDelta,
    encode_event,
)
from voxgate.client import errors
from voxgate.client import events as ev

LIMITS = Limits(1, 2, 3, 4, 5, 6, 7, 8, 9)
WORD = SpokenWord("hello", 0, 320)


@pytest.mark.parametrize(
    "server_event, expected",
    [
        (ResponseStarted("r1"), ev.ResponseStarted("r1")),
        (TranscriptDelta("r1", "hi"), ev.TranscriptDelta("r1", "hi")),
        (ResponseWords("r1", (WORD,)), ev.Words("r1", (ev.Word("hello", 0, 320),))),
        (SpeechStarted(120), ev.SpeechStarted(120)),
        (InputTranscript("open the doors", turn_id="t1"), ev.InputTranscript("open the doors")),
        (InputTranscript(error="no model"), ev.InputTranscript("", "no model")),
        (
            ResponseDone("r1", ResponseStatus.COMPLETED, 400, 90),
            ev.ResponseDone("r1", "completed", 400, 90, None),
        ),
        (
            ResponseDone("r1", ResponseStatus.CANCELLED, 400, 90, (WORD,)),
            ev.ResponseDone("r1", "cancelled", 400, 90, (ev.Word("hello", 0, 320),)),
        ),
        (ErrorEvent(ErrorCode.TOO_LARGE, "big", True), ev.Error("too_large", "big", True)),
        (SessionEnded(EndReason.IDLE_TIMEOUT), ev.SessionEnded("idle_timeout")),
    ],
)
def test_each_server_event_parses_into_its_type(server_event, expected):
    assert ev.parse_event(encode_event(server_event)) == expected


def test_session_started_and_unknown_events():
    started = SessionStarted("s1", "voxgate-tiny", None, AudioSpec(), LIMITS, word_timings=True)
    info = ev.parse_event(encode_event(started), received_at=5.0)
    assert (info.session_id, info.model, info.input_audio) == ("s1", "voxgate-tiny", None)
    assert info.output_audio == {"format": "opus", "sample_rate": 48000, "frame_ms": 20}
    assert info.limits["lead_ms"] == 8 and info.word_timings and info.received_at == 5.0
    assert not info.transcribes  # left out: the server does not transcribe this model's turns
    offered = SessionStarted("s1", "glm", None, AudioSpec(), LIMITS, transcribes=True)
    assert ev.parse_event(encode_event(offered)).transcribes
    # A newer server's optional event is passed on, not refused.
    other = ev.parse_event('{"type": "response.visemes", "response_id": "r1"}')
    assert other == ev.UnknownEvent(
        "response.visemes", {"type": "response.visemes", "response_id": "r1"}
    )
    for bad in ('"text"', '{"no": "type"}', '{"type": "response.started"}'):
        with pytest.raises(ValueError):
            ev.parse_event(bad)


def test_session_started_gives_the_voice_and_the_models_options():
    """The session's voice (after a voice_clip, the new voice's id, to name again later) and
    the options the model takes are fields of SessionInfo, not only of its raw event."""
    option = {"name": "exaggeration", "default": 0.5, "minimum": 0.0, "maximum": 2.0, "help": ""}
    started = SessionStarted(
        "s1", "tiny-chatterbox", None, AudioSpec(), LIMITS, voice="clip-1", model_options=(option,)
    )
    info = ev.parse_event(encode_event(started))
    assert info.voice == "clip-1" and info.model_options == (option,)
    plain = ev.parse_event(encode_event(SessionStarted("s1", "glm", None, AudioSpec(), LIMITS)))
    assert plain.voice is None and plain.model_options == ()  # a model without either


def test_every_error_code_and_close_code_has_its_class():
    for code in ErrorCode:
        exc = errors.server_error(code.value, "why", fatal=True, close_code=1013)
        assert type(exc) is errors.ERROR_CLASSES[code] and exc.code is code
        assert (exc.message, exc.fatal, exc.close_code) == ("why", True, 1013)
    assert isinstance(errors.server_error("overloaded", ""), errors.CapacityError)
    assert type(errors.server_error("brand_new", "")) is errors.ServerError  # unknown: base
    for code in CloseCode:
        closed = errors.session_closed(int(code), "reason")
        assert isinstance(closed, errors.SessionClosed) and closed.code == code
    later = errors.session_closed(1013)
    assert isinstance(later, errors.TryAgainLater) and isinstance(later, errors.CapacityError)
    assert type(errors.session_closed(4000)) is errors.SessionClosed
    assert type(errors.session_closed(None)) is errors.SessionClosed


def test_session_start_leaves_defaults_out_and_takes_extra_fields():
    from voxgate.client import session_start_event

    assert session_start_event() == {"type": "session.start"}
    event = session_start_event(
        voice="slt",
        sampling={"seed": 1},
        extra={"model_options": {"exaggeration": 0.5}, "voice": "clip-1"},
    )
    # Fields the client does not name go in as they are, and win over its own.
    assert event == {
        "type": "session.start",
        "voice": "clip-1",
        "sampling": {"seed": 1},
        "model_options": {"exaggeration": 0.5},
    }
