"""`speed` on `/v1/stream`'s session.start, end to end on voxgate-tiny (which times its words):
the audio, the word timings and the words heard at a barge-in are all in played time."""

from __future__ import annotations

import pytest
from gateway_testkit import barge_in

from engine.api import ModelFacts
from gateway.protocol import ErrorCode, ProtocolError, SessionStart
from gateway.session_start import resolve_options
from voxgate.client import BadField, connect

SENTENCE = "Please call me back when you get home tonight."
SAMPLING = {"seed": 7}  # the voice's own temperature, repeatable
FRAME_MS = 20


@pytest.fixture(scope="module")
def tiny(make_tiny_server):
    return make_tiny_server()


async def spoken(url: str, **start) -> tuple[dict, int, list]:
    """(session.started, the response's audio_ms, its timed words) for SENTENCE."""
    async with connect(url, sampling=SAMPLING, **start) as session:
        reply = await session.speak(SENTENCE).collect()
        assert reply.status == "completed"
        assert len(reply.frames) * FRAME_MS == reply.audio_ms
        return session.info.raw, reply.audio_ms, list(reply.words)


async def test_speed_plays_the_same_words_in_less_time(tiny):
    started, normal_ms, normal_words = await spoken(tiny.url)
    assert "speed" not in started  # only a session that asked for a speed is told it
    started, fast_ms, fast_words = await spoken(tiny.url, speed=2.0)
    assert started["speed"] == 2.0
    # Half as long, give or take a padded frame on each side.
    assert abs(fast_ms - normal_ms / 2) <= 2 * FRAME_MS, (fast_ms, normal_ms)
    # The same words, each said at half its time at speed 1 (ms rounding aside).
    assert [w.word for w in fast_words] == [w.word for w in normal_words]
    for fast, normal in zip(fast_words, normal_words, strict=True):
        assert abs(fast.start_ms - normal.start_ms / 2) <= 1
        assert abs(fast.end_ms - normal.end_ms / 2) <= 1
    assert fast_words[-1].end_ms <= fast_ms


async def test_a_barge_in_reports_the_words_heard_in_played_time(tiny):
    text = f"{SENTENCE} And do not forget to bring the letters from the office."
    async with connect(tiny.url, sampling=SAMPLING, speed=1.5) as session:
        # 900 ms received, of which the listener has heard 600 ms: barge in.
        sent_words, done = await barge_in(session, text, after_ms=900, heard_ms=600)
    heard = list(done.heard_words)
    assert heard and all(w.end_ms <= 600 for w in heard)
    assert heard == [w for w in sent_words if w.end_ms <= 600]


@pytest.mark.parametrize("speed", [0.1, 4.5, "fast", True])
async def test_a_bad_speed_refuses_the_session(tiny, speed):
    with pytest.raises(BadField) as info:
        async with connect(tiny.url, extra={"speed": speed}):
            pass
    assert "[0.25, 4.0]" in info.value.message and info.value.fatal


def test_a_full_duplex_model_refuses_another_speed():
    duplex = ModelFacts("duplex", 24000, 12.5, (), 1, 1, full_duplex=True)
    assert resolve_options(SessionStart(speed=1.0), duplex, None).speed == 1.0
    with pytest.raises(ProtocolError) as info:
        resolve_options(SessionStart(speed=1.5), duplex, None)
    assert info.value.code is ErrorCode.BAD_FIELD and "real time" in info.value.message


def twilio_start(**parameters: str):
    import json

    from gateway.twilio import TwilioWire

    facts = ModelFacts("tts", 24000, 12.5, (), 1, 1)
    start = {
        "event": "start",
        "streamSid": "MZ1",
        "start": {
            "streamSid": "MZ1",
            "accountSid": "AC1",
            "callSid": "CA1",
            "tracks": ["inbound"],
            "customParameters": parameters,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
    }
    return TwilioWire(facts).decode_text(json.dumps(start))[0]


def test_a_twilio_call_takes_speed_as_a_stream_parameter():
    assert twilio_start(speed="1.25").speed == 1.25
    assert twilio_start().speed is None
    for bad in ("fast", "9", "nan"):
        with pytest.raises(ProtocolError) as info:
            twilio_start(speed=bad)
        assert info.value.code is ErrorCode.BAD_FIELD and "[0.25, 4.0]" in info.value.message
