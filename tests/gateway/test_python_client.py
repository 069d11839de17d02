"""The Python client (voxgate.client) against real servers: the default model (voxgate-tiny,
its shipped voice) for speaking, streaming text, cancelling and word timings; tiny-moshi for
microphone audio; and the typed errors of each kind of refusal."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from gateway_testkit import barge_in

from voxgate.client import (
    Audio,
    AuthenticationError,
    BadField,
    CapacityError,
    Overloaded,
    ResponseDone,
    TooLarge,
    UnsupportedInput,
    Words,
    connect,
)

SENTENCE = "Please call me back when you get home tonight."
WORDS = ["please", "call", "me", "back", "when", "you", "get", "home", "tonight"]
SAMPLING = {"seed": 7}  # the voice's own temperature, repeatable


@pytest.fixture(scope="module")
def tiny(make_tiny_server):
    return make_tiny_server()


def assert_timed_in_order(words, audio_ms: int) -> None:
    """Each word's start ≤ end, the next word no earlier than the one before ends, all within
    the response's audio."""
    times = [t for w in words for t in (w.start_ms, w.end_ms)]
    assert times == sorted(times), words
    assert times[0] >= 0 and times[-1] <= audio_ms, (words, audio_ms)


async def test_speak_returns_the_audio_and_its_timed_words(tiny):
    async with connect(tiny.url, sampling=SAMPLING) as session:
        info = session.info
        assert info.model == "voxgate-tiny" and info.model_kind == "tts"
        assert info.word_timings is True and info.input_audio is None
        events = [e async for e in session.speak(SENTENCE)]
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.status == "completed"
    frames = [e for e in events if isinstance(e, Audio)]
    assert len(frames) * 20 == done.audio_ms  # 20-ms Opus packets
    pcm = np.concatenate([f.pcm for f in frames])
    assert abs(len(pcm) - done.audio_ms * 48) <= 960 and np.abs(pcm).max() > 0.05  # speech
    words = [w for e in events if isinstance(e, Words) for w in e.words]
    assert [w.word for w in words] == WORDS
    assert_timed_in_order(words, done.audio_ms)
    # The words come with the audio that says them, not all at the end.
    first_words = next(i for i, e in enumerate(events) if isinstance(e, Words))
    last_frame = max(i for i, e in enumerate(events) if isinstance(e, Audio))
    assert first_words < last_frame


async def test_collect_and_streamed_text(tiny):
    async with connect(tiny.url, sampling=SAMPLING) as session:
        whole = await session.speak(SENTENCE).collect()
        reply = session.next_reply()  # text streams in as an LLM would write it
        await session.send_text("Please call me back ", final=False)
        await session.send_text("when you get home", final=False)
        await session.send_text(" tonight.", final=True)
        streamed = await reply.collect()
        assert await session.end() == "client_ended"
    for got in (whole, streamed):
        assert got.status == "completed" and got.text == " ".join(WORDS)
        assert got.sample_rate == 48000 and len(got.frames) * 20 == got.audio_ms
        assert_timed_in_order(got.words, got.audio_ms)
    assert streamed.response_id != whole.response_id


async def test_cancel_reports_the_words_heard(tiny):
    text = f"{SENTENCE} And do not forget to bring the letters from the office."
    async with connect(tiny.url, sampling=SAMPLING) as session:
        # 1200 ms received, of which the listener has heard 900 ms: barge in.
        sent_words, done = await barge_in(session, text, after_ms=1200, heard_ms=900)
    heard = list(done.heard_words)
    # A prefix of the reply's words: those said to their end within the 900 ms heard.
    assert heard and [w.word for w in heard] == WORDS[: len(heard)]
    assert all(w.end_ms <= 900 for w in heard)
    assert heard == [w for w in sent_words if w.end_ms <= 900]
    unheard = sent_words[len(heard) :]
    assert not unheard or unheard[0].end_ms > 900


async def test_bad_input_raises_typed_errors_and_the_session_goes_on(make_tiny_server):
    server = make_tiny_server(max_text_chars=80)
    async with connect(server.url, sampling=SAMPLING) as session:
        with pytest.raises(TooLarge) as info:
            await session.speak("word " * 40).collect()
        assert info.value.fatal is False and "80" in info.value.message
        await session.send_audio(b"\x00" * 320)  # microphone audio to a text-only model
        error = await session.next_event(timeout=10)
        with pytest.raises(UnsupportedInput):
            raise error.exception()
        with pytest.raises(UnsupportedInput):  # the client knows before sending
            await session.send_pcm(np.zeros(480, np.float32), 24000)
        reply = await session.speak("Still here.").collect()
        assert reply.status == "completed" and reply.text == "still here"
    with pytest.raises(BadField) as refused:  # fatal: session.start itself is wrong
        await connect(server.url, voice="nobody")
    assert refused.value.fatal and refused.value.close_code == 1007
    assert "slt" in refused.value.message


async def test_api_keys(make_tiny_server):
    server = make_tiny_server(api_keys=("key-0001",))
    with pytest.raises(AuthenticationError) as missing:
        await connect(server.url)
    with pytest.raises(AuthenticationError) as wrong:
        await connect(server.url, api_key="guess-0001")
    assert (missing.value.status, wrong.value.status) == (401, 403)
    assert "requires an API key: pass api_key" in str(missing.value)
    assert "refused this client" in str(wrong.value) and "invalid API key" in str(wrong.value)
    for in_subprotocol in (False, True):
        async with connect(
            server.url, api_key="key-0001", key_in_subprotocol=in_subprotocol
        ) as session:
            assert session.info.model == "voxgate-tiny"


async def test_a_full_server_refuses_with_overloaded(make_tiny_server):
    server = make_tiny_server(max_sessions=1)
    async with connect(server.url) as first:
        with pytest.raises(Overloaded) as refused:
            await connect(server.url)
        assert await first.end() == "client_ended"
    assert isinstance(refused.value, CapacityError)
    assert refused.value.close_code == 1013 and refused.value.fatal
    # The slot is free again once the server has torn the first session down.
    for _ in range(50):
        try:
            async with connect(server.url) as session:
                assert session.info.session_id
                return
        except Overloaded:
            await asyncio.sleep(0.1)
    raise AssertionError("the server kept the ended session's slot")


@pytest.mark.parametrize(
    "input_audio",
    [None, {"format": "pcm16", "sample_rate": 16000}],  # None: Opus, the protocol's default
)
async def test_microphone_audio_to_a_full_duplex_model(moshi_server, input_audio):
    rate, seconds = 24000, 1.0
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    options = {"sampling": {"temperature": 0.0}, "input_audio": input_audio}
    async with connect(moshi_server.url, **options) as session:
        assert session.info.model_kind == "full_duplex"
        assert session.info.input_audio["format"] == (input_audio or {"format": "opus"})["format"]
        reply = session.next_reply()
        chunk = rate // 50  # 20 ms, in real time as a microphone delivers it
        start, sent = time.monotonic(), 0
        for i in range(0, len(tone), chunk):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            sent += await session.send_pcm(tone[i : i + chunk], rate)
        sent += await session.flush_audio()  # a resampler's last samples, padded to a frame
        await asyncio.sleep(0.3)  # the last frames reach the engine
        await session.commit()
        got = await reply.collect()
    assert sent == seconds * 1000 / 20  # 20-ms frames, every sample sent
    assert got.status == "completed" and got.audio_ms > 0
    assert len(got.pcm) == got.audio_ms * 48


def test_the_blocking_client(tiny):
    from voxgate.client.sync import connect as connect_sync

    with connect_sync(tiny.url, sampling=SAMPLING) as session:
        reply = session.speak(SENTENCE)
        assert reply.status == "completed" and reply.text == " ".join(WORDS)
        assert session.end() == "client_ended"
