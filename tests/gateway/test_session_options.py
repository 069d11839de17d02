"""A session's sampling is checked against the served model's context when it is set
(session.start, and session.update on the Realtime endpoint): a max_tokens no prompt could
leave room for is refused there, naming the context, instead of failing every response."""

from __future__ import annotations

import pytest

from engine.api import ModelFacts
from gateway.protocol import ErrorCode, ProtocolError, SessionStart
from gateway.session_start import resolve_options, update_options
from gateway.wire import SessionUpdate

FACTS = ModelFacts("tts", 24000, 82.0, (), 1, 1, max_context=4096)


def test_max_tokens_beyond_the_context_is_refused_at_session_start():
    assert resolve_options(SessionStart(sampling={"max_tokens": 4095}), FACTS, None)
    with pytest.raises(ProtocolError) as info:
        resolve_options(SessionStart(sampling={"max_tokens": 4096}), FACTS, None)
    assert info.value.code is ErrorCode.BAD_FIELD
    assert "context of 4096" in info.value.message and "got 4096" in info.value.message


def test_an_update_beyond_the_context_is_refused_and_changes_nothing():
    options = resolve_options(SessionStart(sampling={"max_tokens": 300}), FACTS, None)
    assert update_options(options, SessionUpdate(sampling={"max_tokens": 600}), FACTS)
    with pytest.raises(ProtocolError) as info:
        update_options(options, SessionUpdate(sampling={"max_tokens": 10**40}), FACTS)
    assert info.value.code is ErrorCode.BAD_FIELD and "context of 4096" in info.value.message
    assert options.sampling.max_tokens == 300
