"""The live requests gathered column by column (engine/stream_columns.py) say what Request's
properties say, request by request; the listeners' health and admission's outlook read from
them match a reading of each request; the room's search from a guess finds what a search from
nothing finds (no torch)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.listener_guard import SETTLED_AFTER_S, ListenerHealth, health_of
from engine.realtime_capacity import _most
from engine.request import Request, RequestStatus, SamplingParams
from engine.stream_columns import StreamColumns, gather

NOW = 1000.0


def random_request(rng: random.Random) -> Request:
    """A request in any state a live engine holds: waiting, decoding with or without audio
    out, with a playback report or not, held from its listener, played faster, in a codec
    job, at its max_tokens, or finished."""
    max_tokens = rng.randint(5, 300)
    request = Request(
        [1] * rng.randint(1, 60),
        SamplingParams(max_tokens=max_tokens, min_tokens=rng.randint(0, 5)),
        arrival_time=NOW - rng.uniform(0, 20),
        audible_after_s=rng.choice([0.0, 0.0, rng.uniform(0, 3)]),
        delivery_hold_s=rng.choice([0.0, rng.uniform(0, 0.5)]),
        playback_rate=rng.choice([1.0, 1.0, rng.uniform(0.5, 2.0)]),
        realtime=rng.random() < 0.8,
        text_chars=rng.choice([0, rng.randint(1, 300)]),
    )
    request.status = rng.choice(list(RequestStatus))
    made = rng.randint(0, max_tokens)
    request.output_ids = [7] * made
    request.num_inflight = rng.randint(0, min(2, max_tokens - made))
    request.num_detokenized = rng.randint(0, made)
    if rng.random() < 0.5:
        request.detok_in_flight_tokens = rng.randint(1, 30)
    if rng.random() < 0.7:
        request.first_audio_time = NOW - rng.uniform(0, 15)
        request.first_chunk_s = rng.choice([0.0, rng.uniform(0.1, 0.6)])
        request.audio_emitted_s = rng.uniform(0, 20)
        if rng.random() < 0.5:
            request.played_s = rng.uniform(0, 10)
            request.played_report_time = NOW - rng.uniform(0, 2)
    return request


@pytest.mark.parametrize("seed", range(5))
def test_the_columns_say_what_each_requests_properties_say(seed):
    rng = random.Random(seed)
    requests = [random_request(rng) for _ in range(200)]
    columns = gather(requests, NOW)
    live = [r for r in requests if r.wants_tokens]
    assert len(columns) == len(live) > 0
    expect = {
        "realtime": [r.realtime for r in live],
        "context_tokens": [r.num_tokens for r in live],
        "generated": [r.num_generated for r in live],
        "max_tokens": [r.sampling.max_tokens for r in live],
        "min_tokens": [r.sampling.min_tokens for r in live],
        "text_chars": [r.text_chars for r in live],
        "lead_s": [r.audio_lead_s(NOW) for r in live],
        "waiting_tokens": [r.pending_detok_tokens for r in live],
        "undecoded_tokens": [r.undecoded_tokens for r in live],
        "first_chunk_s": [r.first_chunk_s for r in live],
    }
    for name, values in expect.items():
        np.testing.assert_allclose(getattr(columns, name), values, rtol=1e-12, err_msg=name)
    since = [np.nan if r.playing_since is None else r.playing_since for r in live]
    np.testing.assert_allclose(columns.playing_since, since, rtol=1e-12)


def health_by_request(
    requests: list[Request], short_below_s: float, token_s: float, codec_s: float
) -> ListenerHealth:
    """The listener guard's reading, one request at a time from Request's properties."""
    settled = short = unsettled = playing = 0
    shortest = None
    for request in requests:
        if not request.wants_tokens:
            continue
        first = request.playing_since
        playing += first is not None
        if first is None or NOW - first < SETTLED_AFTER_S:
            unsettled += 1
            continue
        settled += 1
        delivered = request.audio_lead_s(NOW)
        tokens = request.undecoded_tokens if delivered >= codec_s else request.pending_detok_tokens
        lead = delivered + tokens * token_s
        line = min(short_below_s, request.first_chunk_s or short_below_s)
        if lead < line:
            short += 1
            if shortest is None or lead - line < shortest[0] - shortest[1]:
                shortest = (lead, line)
    return ListenerHealth(settled, short, unsettled, playing, shortest)


@pytest.mark.parametrize("seed", range(5))
def test_the_listeners_health_from_columns_is_each_listeners_reading(seed):
    rng = random.Random(100 + seed)
    requests = [random_request(rng) for _ in range(200)]
    shorts = 0
    for codec_s in (0.0, 0.05, 0.3):
        expected = health_by_request(requests, 0.5, 0.012, codec_s)
        shorts += expected.short
        got = health_of(gather(requests, NOW), NOW, 0.5, 0.012, codec_s)
        assert got.settled == expected.settled and got.short == expected.short
        assert (got.unsettled, got.playing) == (expected.unsettled, expected.playing)
        assert got.shortest == pytest.approx(expected.shortest)
    assert shorts > 0  # the readings compared include listeners short of audio


def test_nothing_live_is_empty_columns_and_no_listener():
    done = Request([1], SamplingParams(max_tokens=4), arrival_time=NOW)
    done.status = RequestStatus.FINISHED_STOPPED
    for requests in ([], [done]):
        columns = gather(requests, NOW)
        assert len(columns) == 0 and columns.lead_s.dtype == np.float64
        assert health_of(columns, NOW, 0.5, 0.012) == ListenerHealth()
    assert len(StreamColumns.empty().where(np.zeros(0, dtype=bool))) == 0


@pytest.mark.parametrize("seed", range(20))
def test_a_search_from_a_guess_finds_what_a_search_from_nothing_finds(seed):
    rng = random.Random(seed)
    cap = rng.choice([5, 50, 1000])
    answer = rng.randint(-1, cap)  # -1: not even the least fits
    least = rng.choice([0, 0, 1])
    tries: list[int] = []

    def fits(n: int) -> bool:
        tries.append(n)
        return n <= answer

    plain = _most(fits, cap, least)
    for near in (None, rng.randint(-5, cap + 5), answer, answer + 1, answer - 1):
        assert _most(fits, cap, least, near=near) == plain
    expected = None if answer < least else answer
    assert plain == expected
    if 2 <= answer < cap:
        tries.clear()
        _most(fits, cap, least, near=answer)
        assert len(tries) <= 3  # a guess at the answer: it, the next one up, and done
