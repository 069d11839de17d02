"""Unit tests of the gateway's pure parts: segmentation, pacing, send queue, auth, settings."""

from __future__ import annotations

import pytest

from engine.request import ConfigError
from gateway.auth import Authenticator, Denial, Principal, SessionSlots, select_subprotocol
from gateway.config import GatewaySettings, keys_from_env
from gateway.pacing import PlaybackClock, SendQueue, SendQueueFull
from gateway.protocol import CloseCode, ErrorCode
from gateway.segmenter import SentenceSegmenter
from gateway.socket_items import OutAudio, OutClose, OutText


# --- segmentation -----------------------------------------------------------------------------
def test_segments_cut_at_sentence_ends_as_text_streams():
    seg = SentenceSegmenter(min_chars=10, max_chars=200)
    out = []
    for piece in ["Hello the", "re, friend. How a", "re you? 3.5 is", " a number. Bye"]:
        out += seg.push(piece)
    # "friend." is confirmed by the space that follows; "3.5" is never a boundary.
    assert out == ["Hello there, friend.", "How are you?", "3.5 is a number."]
    assert seg.finish() == ["Bye"]


def test_short_sentences_merge_and_long_text_is_cut():
    seg = SentenceSegmenter(min_chars=20, max_chars=40)
    assert seg.push("Hi. Dr. Smith is here today. ") == ["Hi. Dr. Smith is here today."]
    words = "word " * 20
    pieces = seg.push(words)
    assert pieces and all(len(p) <= 40 for p in pieces)
    assert " ".join(pieces + seg.finish()).split() == words.split()


def test_a_title_or_latin_abbreviation_does_not_end_a_segment():
    # "Dr." past min_chars: cut there, the model would read a bare "dr" and "Lee!" apart.
    seg = SentenceSegmenter(min_chars=20, max_chars=300)
    assert seg.push("Call me at 10:30, Dr. ") == []  # streamed: waits for the name
    assert seg.push("Lee! Then Mrs. Jones, e.g. at noon. ") == [
        "Call me at 10:30, Dr. Lee!",
        "Then Mrs. Jones, e.g. at noon.",
    ]
    # A word merely ending in those letters is a word; a line break still ends the segment.
    assert seg.push("The pipe is marked hydr. ") == ["The pipe is marked hydr."]
    assert seg.push("A long line written to Dr.\nNext") == ["A long line written to Dr."]
    assert seg.finish() == ["Next"]


def test_line_breaks_and_cjk_are_boundaries():
    seg = SentenceSegmenter(min_chars=2, max_chars=100)
    assert seg.push("first line\nsecond") == ["first line"]
    assert seg.push("。你好！") == ["second。", "你好！"]
    assert seg.finish() == []


# --- pacing -----------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_playback_clock_paces_to_the_lead():
    clock = FakeClock()
    pc = PlaybackClock(lead_s=1.0, clock=clock)
    for _ in range(50):  # the first second goes out at once
        assert pc.delay() == 0.0
        assert not pc.mark_sent(0.02)
    assert pc.delay() == pytest.approx(0.0)
    pc.mark_sent(0.02)
    assert pc.delay() == pytest.approx(0.02)  # now one frame past the lead
    clock.now += 0.5
    assert pc.delay() == 0.0


def test_the_next_frame_is_needed_when_the_client_has_played_all_it_was_sent():
    """What a reply's encodes are ranked by (gateway.codec_workers.in_need_order): before the
    first frame the listener waits for it (needed now), then when what was sent runs out, and
    once a listener ran dry, now."""
    clock = FakeClock()
    pc = PlaybackClock(lead_s=1.0, clock=clock)
    assert pc.runs_dry_at() == 100.0
    for _ in range(15):  # a first chunk of 300 ms, sent at once
        pc.mark_sent(0.02)
    clock.now += 0.1
    assert pc.runs_dry_at() == pytest.approx(100.3)
    clock.now += 0.5  # ran dry 0.3 s ago
    assert pc.runs_dry_at() == pytest.approx(100.6)


def test_a_full_lead_releases_frames_in_groups():
    """Once the lead is full, the clock waits until release_s more has played, and the frames
    then go together: never more than the lead ahead, never less than lead - release_s - a frame."""
    clock = FakeClock()
    pc = PlaybackClock(lead_s=1.0, clock=clock, release_s=0.1)
    wakes = 0
    for _ in range(500):  # 10 s of audio
        pause = pc.wait_s()
        if pause > 0:
            wakes += 1
            clock.now += pause
        ahead = pc.sent_s - pc.position()
        assert ahead <= 1.0 + 1e-9
        if pc.sent_s > 1.0:
            assert ahead >= 1.0 - 0.1 - 0.02 - 1e-9
        assert not pc.mark_sent(0.02)
    assert 9.0 / 0.12 <= wakes <= 9.0 / 0.1 + 1  # one per ~100 ms played, not one per frame
    # Never more than half the lead: a 100-ms lead releases 50 ms at a time, lead 0 frame by frame.
    assert PlaybackClock(lead_s=0.1).release_s == pytest.approx(0.05)
    assert PlaybackClock(lead_s=0.0).release_s == 0.0


def test_playback_clock_counts_underruns_and_rebases():
    clock = FakeClock()
    pc = PlaybackClock(lead_s=0.1, clock=clock)
    pc.mark_sent(0.2)
    clock.now += 0.5  # the client played 0.2 s and then waited 0.3 s
    assert pc.mark_sent(0.2) is True
    assert pc.underruns == 1
    # playback restarted with the late frame: 0.2 s in hand again
    assert pc.delay() == pytest.approx(0.2 - 0.1)
    clock.now += 0.05
    assert pc.mark_sent(0.2) is False


async def test_send_queue_bounds_audio_and_events():
    q = SendQueue(max_audio_ms=100, max_events=2)
    for _ in range(5):
        q.put(OutAudio(b"x", 20))
    with pytest.raises(SendQueueFull):
        q.put(OutAudio(b"x", 20))
    q.put(OutText("a"))
    q.put(OutText("b"))
    with pytest.raises(SendQueueFull):
        q.put(OutText("c"))
    q.put_final(OutClose(1000))  # closing events bypass the bound
    assert (await q.get()) == OutAudio(b"x", 20)
    assert q.audio_ms == 80
    q.put(OutAudio(b"y", 20))
    q.clear()
    assert len(q) == 0 and q.audio_ms == 0 and q.events == 0


# --- auth -------------------------------------------------------------------------------------
def test_auth_header_subprotocol_and_refusals():
    auth = Authenticator(["k1-secret", "k2-secret"], ["https://app.example.com"])
    assert auth.check({"authorization": "Bearer k2-secret"}, []) == Principal("key-1")
    assert auth.check({}, ["voxgate.v1", "bearer.k1-secret"]) == Principal("key-0")
    assert auth.check({}, ["voxgate.v1"]) == Denial(401, auth.check({}, []).message)
    assert auth.check({"authorization": "Bearer nope"}, []).status == 403
    assert auth.check({"authorization": "Basic k1-secret"}, []).status == 401
    origin = {"origin": "https://evil.example.com", "authorization": "Bearer k1-secret"}
    assert auth.check(origin, []) == Denial(403, "origin not allowed")
    allowed = {"origin": "https://APP.example.com/", "authorization": "Bearer k1-secret"}
    assert auth.check(allowed, []) == Principal("key-0")


def test_no_keys_means_open_and_subprotocol_never_echoes_the_key():
    assert Authenticator([], []).check({}, []) == Principal(None)
    assert select_subprotocol(["bearer.k1", "voxgate.v1"]) == "voxgate.v1"
    assert select_subprotocol(["bearer.k1"]) is None


def test_session_slots_per_key_and_global():
    slots = SessionSlots(max_sessions=3, max_per_key=2)
    a, b = Principal("key-0"), Principal("key-1")
    assert slots.acquire(a) is None and slots.acquire(a) is None
    refusal = slots.acquire(a)
    assert refusal.code is ErrorCode.RATE_LIMITED and refusal.close_code is CloseCode.POLICY
    assert slots.acquire(b) is None
    refusal = slots.acquire(b)
    assert refusal.code is ErrorCode.OVERLOADED and refusal.close_code is CloseCode.TRY_AGAIN_LATER
    slots.release(a)
    assert slots.acquire(b) is None
    assert slots.open_for(a) == 1


# --- settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value, words",
    [
        ("port", 70000, "port"),
        ("api_keys", ("has space",), "API keys"),
        ("allowed_origins", ("example.com",), "allowed origin"),
        ("lead_ms", -1, "lead_ms"),
        ("max_frame_bytes", 10**9, "max_frame_bytes"),
        ("segment_pipeline_depth", 0, "segment_pipeline_depth"),
    ],
)
def test_settings_refuse_bad_values_clearly(field, value, words):
    with pytest.raises(ConfigError, match=words):
        GatewaySettings(**{field: value})


def test_keys_from_env():
    assert keys_from_env({"VOXGATE_API_KEYS": "a1, b2 ,,c3"}) == ("a1", "b2", "c3")
    assert keys_from_env({}) == ()


def test_a_single_shot_text_shares_its_token_budget_among_segments():
    from engine.request import SamplingParams
    from gateway.response import Response, share_tokens
    from gateway.segmenter import SentenceSegmenter

    response = Response("r1", SentenceSegmenter())
    first = "This first sentence is long enough to stand alone. "
    second = "And so is this second one, a bit longer than the first."
    response.add_text(first + second, final=True)
    shares = response.token_shares
    assert shares is not None and len(shares) == 2 and abs(sum(shares) - 1) < 1e-9
    budget = SamplingParams(max_tokens=700, min_tokens=700)
    parts = [share_tokens(budget, s) for s in shares]
    assert abs(sum(p.max_tokens for p in parts) - 700) <= 1
    assert all(p.min_tokens == p.max_tokens for p in parts)

    streamed = Response("r2", SentenceSegmenter())
    streamed.add_text(first, final=False)
    streamed.add_text(second, final=True)
    assert streamed.token_shares is None  # the future was unknown: each segment gets it all


async def test_streamed_text_for_a_model_that_appends_text_opens_at_its_first_whole_word():
    """A response for a model that takes text into a running request: streamed text is not
    segmented, its opening waits for a word followed by a space (a line break is not enough:
    the model tokenises up to a space), later pieces follow in order; text sent whole, or for
    another model, is segmented as before."""
    from gateway.response import Response
    from gateway.segmenter import SentenceSegmenter

    response = Response("r1", SentenceSegmenter(), appends_text=True)
    for piece in ["  Hel", "lo\nthe", "re, ", "you. More text follows"]:
        response.add_text(piece, final=False)
    response.add_text(".", final=True)
    assert response.streamed and response.input_closed
    assert await response.opening_text() == ("  Hello\nthere, ", False)
    assert await response.next_piece() == ("you. More text follows", False)
    assert await response.next_piece() == (".", True)

    closed = Response("r2", SentenceSegmenter(), appends_text=True)
    closed.add_text("Hel", final=False)
    closed.close_input()  # a barge-in before the first word
    assert await closed.opening_text() is None

    whole = Response("r3", SentenceSegmenter(), appends_text=True)
    whole.add_text("All of it at once.", final=True)
    assert not whole.streamed and await whole.next_segment() == "All of it at once."
    plain = Response("r4", SentenceSegmenter())
    plain.add_text("Streamed, for a model that takes text whole. ", final=False)
    assert not plain.streamed
