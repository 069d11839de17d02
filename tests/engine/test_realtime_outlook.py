"""Real-time admission's outlook (engine/realtime_outlook.py): the closed form over the
streams' ends equals a round-by-round walk, and it judges growing contexts as a listener
would hear them."""

import json
import math
import random

import numpy as np
import pytest

from engine.realtime_capacity import REALTIME_LOAD
from engine.realtime_outlook import Shortfall, StreamOutlook, TurnModel, shortfall


def line(fixed_s: float, per_row_s: float):
    return lambda rows: fixed_s + per_row_s * np.asarray(rows, dtype=np.float64)


def walked(
    streams: list[StreamOutlook],
    turn: TurnModel,
    budget_s: float,
    lead_cap_s: float = math.inf,
    end_step: int = 1,
    floor_s: float = 0.0,
) -> float:
    """The largest lack of audio, round by round: every stream with tokens left makes its
    share of one a round (a listener a whole one), a round reads each one's context so far
    plus half a page, by its share, and a listener's lead grows by a token's budget less the
    round, up to the cap (or its own bank); a lead that fell in a round must stay at
    `floor_s` or above."""
    ends = [math.ceil(s.remaining_tokens / s.share) for s in streams]
    ends = [-(-end // end_step) * end_step for end in ends]
    leads = [s.banked_s for s in streams]
    caps = [max(s.banked_s, lead_cap_s) for s in streams]
    worst = [math.inf] * len(streams)
    for k in range(1, max(ends) + 1):
        active = [i for i, end in enumerate(ends) if end >= k]
        rows = sum(streams[i].share for i in active)
        turns = max(rows / turn.max_rows, 1.0)  # beyond the cap, full turns in turn
        pages = sum(
            streams[i].share
            * ((streams[i].context_tokens + streams[i].share * k) / turn.page_tokens + 0.5)
            for i in active
        )
        round_s = turns * float(turn.by_rows(min(rows, turn.max_rows))) + turn.page_s * pages
        for i in active:
            if streams[i].listened:
                before, leads[i] = leads[i], min(caps[i], leads[i] + budget_s - round_s)
                if leads[i] < before:
                    worst[i] = min(worst[i], leads[i] - floor_s)
    return max(0.0, -min(worst))


@pytest.mark.parametrize("seed", range(32))
def test_the_closed_form_equals_walking_the_rounds(seed):
    rng = random.Random(seed)
    streams = [
        StreamOutlook(
            rng.randint(0, 400),
            rng.randint(1, 150),
            rng.uniform(0, 0.5),
            rng.choice([1.0, 1.0, 1.0, 0.25, 0.5]),  # some without a listener
        )
        for _ in range(rng.randint(1, 25))
    ]
    turn = TurnModel(
        line(rng.uniform(0.002, 0.004), rng.uniform(0, 1e-4)),
        rng.uniform(0, 2e-6),
        16,
        rng.choice([4, 8, 64]),
    )
    budget = rng.uniform(0.004, 0.012)
    cap = rng.choice([math.inf, 0.05, 0.3])
    step = rng.choice([1, 8])
    floor = rng.choice([0.0, 0.0, 0.02, 0.1])
    lack = walked(streams, turn, budget, cap, step, floor)
    short = shortfall(streams, turn, budget, cap, step, floor)
    if lack <= 1e-12:
        assert short is None
    else:
        assert short is not None and short.behind_s == pytest.approx(lack, rel=1e-9, abs=1e-12)


ORPHEUS_LIKE = TurnModel(line(0.003, 6e-6), 0.24e-6, 16, 320)  # BENCHMARKS.md's served fit
TOKEN_BUDGET = REALTIME_LOAD / 82.03  # a token of Orpheus' audio, admission's budget


def test_streams_that_fit_now_but_not_once_their_contexts_grow_are_refused():
    """300 streams at 200 tokens each take ~5.7 ms a turn, well inside the 12.2 ms a token
    allows; 3,000 tokens later their pages make a turn ~19 ms, and the time their early,
    cheap turns saved does not cover it: they end most of a second short."""
    streams = [StreamOutlook(200, 3000, 0.0)] * 300
    now = float(ORPHEUS_LIKE.by_rows(300)) + ORPHEUS_LIKE.page_s * 300 * 200 / 16
    assert now < TOKEN_BUDGET
    short = shortfall(streams, ORPHEUS_LIKE, TOKEN_BUDGET)
    assert isinstance(short, Shortfall) and short.behind_s > 0.5
    assert short.after_tokens == 3000  # the lack grows to the streams' end
    # Shorter streams end before their contexts cost that much: they all hold.
    assert shortfall([StreamOutlook(200, 900, 0.0)] * 300, ORPHEUS_LIKE, TOKEN_BUDGET) is None


def test_audio_banked_early_carries_the_listeners_through_the_peak():
    """The same load holds when each stream has banked the audio its peak will lack."""
    streams = [StreamOutlook(200, 3000, 0.0)] * 300
    short = shortfall(streams, ORPHEUS_LIKE, TOKEN_BUDGET)
    assert short is not None
    banked = [StreamOutlook(200, 3000, short.behind_s + 0.01)] * 300
    assert shortfall(banked, ORPHEUS_LIKE, TOKEN_BUDGET) is None


def test_a_stream_is_judged_only_up_to_its_own_end():
    """A stream about to end is not blamed for the lack the long ones meet later; a newcomer
    with nothing banked is."""
    ending = StreamOutlook(2000, 5, 0.0)
    long = [StreamOutlook(1500, 3000, 0.2)] * 280
    short = shortfall([ending, *long], ORPHEUS_LIKE, TOKEN_BUDGET)
    assert short is not None and short.after_tokens > 5
    assert shortfall([ending], ORPHEUS_LIKE, TOKEN_BUDGET) is None


def test_more_streams_than_a_turn_holds_take_several_turns_a_round():
    one_turn = TurnModel(line(0.004, 0.0), 0.0, 16, 8)
    fits = [StreamOutlook(0, 100, 0.0)] * 8  # one 4-ms turn a round against 5 ms
    assert shortfall(fits, one_turn, 0.005) is None
    twice = shortfall(fits * 2, one_turn, 0.005)  # two turns a round: 3 ms short a token
    assert twice is not None and twice.behind_s == pytest.approx(0.3)


def test_nothing_to_make_is_nothing_short():
    assert shortfall([], ORPHEUS_LIKE, TOKEN_BUDGET) is None
    assert shortfall([StreamOutlook(100, 0, 0.0)], ORPHEUS_LIKE, TOKEN_BUDGET) is None


def test_requests_without_a_listener_cost_the_listeners_their_share():
    """Requests without a listener are nobody's audio to keep up, but their share of a row
    and of their pages weighs on every round: 300 listeners that hold alone fall short beside
    1,000 long batch requests at a quarter of real time, and more the larger the share. The
    batch requests alone never fall short."""
    listeners = [StreamOutlook(200, 900, 0.0)] * 300
    assert shortfall(listeners, ORPHEUS_LIKE, TOKEN_BUDGET) is None
    quarter = [StreamOutlook(200, 3000, 0.0, share=0.25)] * 1000
    short = shortfall([*listeners, *quarter], ORPHEUS_LIKE, TOKEN_BUDGET)
    assert short is not None and short.after_tokens <= 900  # a listener's lack, before its end
    half = [StreamOutlook(200, 3000, 0.0, share=0.5)] * 1000
    shorter = shortfall([*listeners, *half], ORPHEUS_LIKE, TOKEN_BUDGET)
    assert shorter is not None and shorter.behind_s > short.behind_s
    assert shortfall(quarter, ORPHEUS_LIKE, TOKEN_BUDGET) is None


def test_a_refusal_keeps_what_the_outlook_read_and_its_record_judges_the_same():
    """Where the streams' outlook refuses, the verdict carries its inputs; written as plain
    data and read back (the turn's part by rows on a grid), they give the same shortfall."""
    from engine.realtime_capacity import RealtimeCapacity
    from engine.realtime_outlook import OutlookInputs

    capacity = RealtimeCapacity(
        1 / 82.03, 28, max_num_seqs=320, max_detok_batch=64, threaded_codec=False
    )
    capacity.price_pages(ORPHEUS_LIKE.page_s)
    for rows in (1, 8, 64, 256):
        capacity.steps.seed(rows, float(ORPHEUS_LIKE.by_rows(np.array([rows]))[0]))
    for _ in range(8):  # a size whose median floors the larger ones: a step off the line
        capacity.steps.observe(203, 0.0065)
    live = [StreamOutlook(1000 + 4 * i, 1500, 0.5) for i in range(300)]
    verdict = capacity.room_with(live, [StreamOutlook(40, 1500, 0.0)])
    assert not verdict.ok and verdict.outlook is not None
    recorded = verdict.outlook.shortfall()
    again = OutlookInputs.from_record(json.loads(json.dumps(verdict.outlook.to_record())))
    assert len(again.streams) == 301 and again.streams[-1] == StreamOutlook(40, 1500, 0.0)
    rows = np.arange(1, 321, dtype=np.float64)
    np.testing.assert_allclose(
        again.turn.by_rows(rows), capacity.steps.predict_rows(rows), atol=1e-7
    )
    assert capacity.steps.predict(203) > capacity.steps.predict(202)  # the floor's step
    replayed = again.shortfall()
    assert replayed.after_tokens == recorded.after_tokens
    assert replayed.behind_s == pytest.approx(recorded.behind_s, rel=1e-4)
    # With room for all, nothing is kept.
    assert capacity.room_with(live[:20], [StreamOutlook(40, 1500, 0.0)]).outlook is None


FRAME_FLOOR = 7 / 82.03 + 0.01  # an Orpheus frame's 7 tokens and a 10-ms codec job


def test_a_low_point_under_a_frame_and_a_codec_job_is_short():
    """A listener whose lead falls to 50 ms holds by the audio it has, but its next frame
    (85 ms of tokens and a codec job) cannot reach it in time: short by the floor's rest."""
    turn = TurnModel(line(0.0125, 0.0), 0.0, 16, 8)  # a turn 0.5 ms over the token budget
    falling = StreamOutlook(0, 400, 0.25)  # loses 0.5 ms a round: 50 ms left at its end
    assert shortfall([falling], turn, 0.012) is None
    short = shortfall([falling], turn, 0.012, floor_s=FRAME_FLOOR)
    assert short is not None
    assert short.behind_s == pytest.approx(FRAME_FLOOR - (0.25 - 400 * 0.0005))
    # With the audio for the floor banked, it holds.
    banked = StreamOutlook(0, 400, 0.25 + short.behind_s + 1e-6)
    assert shortfall([banked], turn, 0.012, floor_s=FRAME_FLOOR) is None


def test_a_newcomer_below_the_floor_while_its_lead_grows_is_not_short():
    """A newcomer has nothing banked, and neither has a stream just past its first audio:
    under the floor now, but gaining; only where a lead has been falling is it a low point."""
    turn = TurnModel(line(0.008, 0.0), 0.0, 16, 8)  # 4 ms a token to spare
    newcomer, thin = StreamOutlook(0, 300, 0.0), StreamOutlook(40, 300, 0.03)
    assert shortfall([newcomer, thin], turn, 0.012, floor_s=FRAME_FLOOR) is None
    # The same streams once the turns outgrow the budget are short at once.
    slow = TurnModel(line(0.013, 0.0), 0.0, 16, 8)
    short = shortfall([newcomer, thin], slow, 0.012, floor_s=FRAME_FLOOR)
    assert short is not None and short.behind_s == pytest.approx(FRAME_FLOOR + 0.3)
