"""A response's own options (gateway/response_overrides.py): checked as the input that starts
the response arrives (gateway.session_start.check_overrides), then laid over the session's
options as it starts — one carrier for the native text's `model_options` and OpenAI
response.create's options."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.api import ModelFacts
from gateway.protocol import ProtocolError, decode_text_frame
from gateway.reply import SpeechOptions
from gateway.response_overrides import ResponseOverrides
from gateway.session_start import check_overrides
from models.request_options import option_specs, request_option, text_option


@dataclass(frozen=True)
class Knobs:
    pace: float = request_option(1.0, 0.5, 2.0, "speaking pace")
    language: str = text_option("auto", choices=("auto", "English", "German"), help="language")


FACTS = ModelFacts(
    "knobs", 24000, 12.5, (), 1, 1, voices=("ava",), request_options=option_specs(Knobs)
)


def test_a_texts_model_options_are_checked_into_the_models_form_and_laid_over_the_sessions():
    session = SpeechOptions(model_options={"pace": 1.5, "language": "German"})
    text = decode_text_frame(
        '{"type": "text", "text": "hi", "model_options": {"language": "english", "pace": 1}}'
    )
    checked = check_overrides(session, text.overrides, FACTS)
    assert checked.model_options == {"language": "English", "pace": 1.0}
    assert check_overrides(session, ResponseOverrides(voice="ava"), FACTS).model_options is None

    own = checked.over(session)
    assert own.model_options == {"pace": 1.0, "language": "English"}
    session_pace_only = SpeechOptions(model_options={"pace": 1.5})
    assert ResponseOverrides(model_options={"language": "German"}).over(
        session_pace_only
    ).model_options == {"pace": 1.5, "language": "German"}
    assert ResponseOverrides(voice="ava").over(session).model_options == session.model_options


@pytest.mark.parametrize(
    ("overrides", "says", "param"),
    [
        (ResponseOverrides(model_options={"pace": 9}), "model_options.pace must be in", None),
        (ResponseOverrides(model_options={"warmth": 1}), "warmth", None),
        (
            ResponseOverrides("nobody", param_paths={"voice": "response.audio.output.voice"}),
            "voice 'nobody' is not one of knobs's: ava",
            "response.audio.output.voice",
        ),
    ],
)
def test_refused_options_name_what_and_where(overrides, says, param):
    with pytest.raises(ProtocolError) as refused:
        check_overrides(SpeechOptions(), overrides, FACTS)
    assert refused.value.code == "bad_field" and says in refused.value.message
    assert refused.value.param == param


def test_a_model_without_options_refuses_a_texts_model_options_by_name():
    plain = ModelFacts("plain", 24000, 12.5, (), 1, 1)
    with pytest.raises(ProtocolError, match="plain takes no model_options"):
        check_overrides(SpeechOptions(), ResponseOverrides(model_options={"pace": 1}), plain)
