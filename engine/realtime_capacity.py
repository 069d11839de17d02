"""Real-time admission's prediction (no torch): the token interval `n` streams would get from
the engine's measured turn cost, and the codec's budget where it runs beside the LLM, so that
a stream is refused *before* it would push the streams already playing behind real time.

A stream gets one token per LLM step it takes part in. With `n` streams and at most
`max_num_seqs` per step, a stream waits n / max_num_seqs turns of min(n, max_num_seqs) rows
between tokens on average (beyond the cap every turn is full, of the most urgent streams, and
a stream that sits out one runs in a later one, on the audio it banked); that interval must
stay under `REALTIME_LOAD` of a token's playback time. This is the sustained-throughput
condition whatever the lead caps do: streams that sit out a step catch up in a later one, and
a turn of r rows yields r tokens for a + c*r seconds, which is best at r = n. The turn's cost
by rows is fitted from live turns (engine/turn_cost.py). A codec that runs beside the LLM (a
thread of its own, on CUDA) has its own budget: every stream needs a second of audio a
second, in jobs of at most `max_detok_batch` rows of a chunk each, and a job costs a fixed
part plus a part per second of audio it makes (`CodecCost`), so the codec's busy share grows
with the streams and must stay under `REALTIME_LOAD`. Both predictions never fall as streams
are added, so the most streams that fit (`capacity`, the metrics' room) is found by
bisection. Where nothing is measured at all, the model cannot be judged and admission leaves
it to the KV pool (and the listeners' buffers: engine/listener_guard.py).

Where the KV pages a step reads are priced (`page_s`, at warm-up from the device's memory
bandwidth, or measured on a CPU, then from the live turns: engine/page_price.py), the turn is its part by rows plus its
pages, and a count of streams no longer says
enough: the streams' contexts grow as they run, so `room_with` judges the streams themselves
through their outlook (engine/realtime_outlook.py): every one, the newcomer included, must
stay in audio to its end as the turns grow with the pages.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from engine.page_price import PagePrice
from engine.realtime_outlook import (
    OutlookInputs,
    StreamOutlook,
    Streams,
    StreamsLike,
    TurnModel,
)
from engine.refusal_causes import Admission, RefusalCause
from engine.turn_cost import LIVE_WINDOW, CostLine, SampleWindow, TurnCostModel, weighted_line

# A stream is refused once the predicted token interval exceeds this share of a token's
# playback time (and a threaded codec once its predicted busy share does); the rest is margin
# for what the turns just measured do not foretell. Little is needed: the turns are measured
# live, jitter and the gateway's work on the same machine included (replayed over served
# runs' turns, the model's predictions came within 3 % of the turns 1-20 s later:
# bench/turn_replay.py), and the outlook has every stream decode every turn to its end. Where
# a turn's fixed cost is half a token's time (a GPU), each 1 % of margin costs 2 % of the
# streams: at 95 % Orpheus on an H100 let in 207 and 228 of the 248 listeners that hold, at
# 100 % 248 and 241, none late in any run (BENCHMARKS.md). With none at all, the simulator at
# the H200's measured turn costs let a ramp 1.05-1.15 x past its edge in, 5-7 listeners late
# by up to 0.3 s, in 2 of 12 runs; at 98 %, none in any, admitting 2-3 % fewer.
REALTIME_LOAD = 0.98
# The outlook rounds streams' ends up to this many tokens: fewer segments to walk (a
# decision at 300 streams then takes ~0.3 ms), each stream a little longer (64 of Orpheus'
# tokens are 0.8 s of audio at the end of streams of tens of seconds).
OUTLOOK_END_STEP = 64


class CodecCost:
    """A threaded codec's job seconds as a line in the audio the job made: fixed (launches,
    the job's smallest kernels) + per second of audio, fitted like the turn cost (least
    squares, slope and fixed cost >= 0) to the last `window` steady jobs, each bin of audio
    length by its median so one stalled job moves nothing. By audio made, not by rows: a
    row's share of a job runs from one frame to a whole flushed tail, and a one-row job that
    flushed seconds of audio says nothing about two streams' chunks."""

    BIN_S = 0.1  # jobs are grouped by their audio, to this many seconds

    def __init__(self, window: int = LIVE_WINDOW) -> None:
        self._jobs = SampleWindow(window)
        # The fit at a version: admission's bisection asks for it a score of times a decision.
        self._cache: tuple[int, CostLine | None] | None = None

    def observe(self, audio_s: float, seconds: float) -> None:
        """A steady job that made `audio_s` seconds of audio (all its rows) in `seconds`."""
        if audio_s > 0 and seconds >= 0:
            self._jobs.append(audio_s, seconds)

    def fit(self) -> CostLine | None:
        """fixed_s a job + per_unit_s a second of audio; None while no job is measured."""
        cache = self._cache
        if cache is not None and cache[0] == self._jobs.version:
            return cache[1]
        version, jobs = self._jobs.snapshot()
        bins: dict[int, list[tuple[float, float]]] = {}
        for audio_s, seconds in jobs:
            bins.setdefault(round(audio_s / self.BIN_S), []).append((audio_s, seconds))
        points = [
            (
                statistics.median(a for a, _ in group),
                statistics.median(s for _, s in group),
                len(group),
            )
            for group in bins.values()
        ]
        fit = weighted_line(points)
        self._cache = (version, fit)
        return fit

    def busy_share(self, streams: int, rows_per_job: int, chunk_s: float) -> float | None:
        """The share of real time the codec would be busy giving `streams` streams their
        audio, in jobs of up to `rows_per_job` rows of `chunk_s` seconds each (the steady
        chunk: the smaller, dearer one); None while unmeasured. Never less for more streams."""
        fit = self.fit()
        if fit is None:
            return None
        jobs_per_s = streams / (chunk_s * min(streams, rows_per_job))
        return jobs_per_s * fit.fixed_s + streams * fit.per_unit_s


class RealtimeCapacity:
    """Whether the engine keeps every stream in real time with `n` streams."""

    def __init__(
        self,
        seconds_per_token: float,
        chunk_tokens: int,
        max_num_seqs: int,
        max_detok_batch: int,
        threaded_codec: bool,
        page_tokens: int = 16,
        lead_cap_s: float = math.inf,
        floor_s: Callable[[], float] = lambda: 0.0,
        turn_window: int = LIVE_WINDOW,
    ) -> None:
        self.seconds_per_token = seconds_per_token
        self.chunk_tokens = chunk_tokens
        self.max_num_seqs = max_num_seqs
        self.max_detok_batch = max_detok_batch
        self.threaded_codec = threaded_codec
        self.page_tokens = page_tokens
        # The most audio a stream banks while another waits for its first chunk (the
        # scheduler's contended lead cap): a newcomer always does, so the outlook credits a
        # stream's cheap early turns only up to this lead.
        self.lead_cap_s = lead_cap_s
        # The lead under which a listener's next codec frame comes late (a frame's tokens and
        # a codec job: the scheduler's frame_floor_s), read at each judgement.
        self.floor_s = floor_s
        # Seconds a KV page in use adds to a decode turn: priced at warm-up (the page's bytes
        # at the device's memory bandwidth), then learned from the live turns
        # (engine/page_price.py); 0 while unpriced, when the turn is judged by its rows alone.
        self.pages = PagePrice()
        # A decode turn's seconds by rows, less its pages at their price, fitted to the last
        # `turn_window` live turns.
        self.steps = TurnCostModel(window=turn_window, page_price=self.pages.seconds)
        self.codec = CodecCost()  # codec job seconds by audio made (threaded codec only)

    @property
    def page_s(self) -> float:
        """Seconds a KV page in use adds to a decode turn (0: unpriced)."""
        return self.pages.seconds()

    def price_pages(self, seconds: float) -> None:
        """The warm-up's price of a KV page (0: pages unpriced), which the live turns refine."""
        self.pages.prior_s = seconds

    def observe_turn(self, rows: int, seconds: float, pages: int) -> None:
        """A live decode turn of `rows` rows that took `seconds` reading `pages` KV pages:
        it refines the page's price, and its part by rows goes to the turn cost's fit."""
        self.pages.observe(rows, pages, seconds)
        self.steps.observe(rows, seconds, pages)

    def clear_live(self) -> None:
        """Forget the live turns (the warm-up's own, with their one-off compiles)."""
        self.steps.clear_live()
        self.pages.clear_live()

    @property
    def calibrated(self) -> bool:
        return self.steps.measured

    def token_interval(self, streams: int) -> float | None:
        """Predicted seconds between a stream's tokens with `streams` streams generating."""
        batch = min(streams, self.max_num_seqs)
        cost = self.steps.predict(batch)
        if cost is None:
            return None
        return streams / batch * cost  # full turns beyond the cap, each stream its share

    def capacity(
        self,
        live: StreamsLike = (),
        newcomer: StreamOutlook | None = None,
        cap: int = 100_000,
        near: int | None = None,
    ) -> int | None:
        """The most streams predicted to stay in real time (at least 1: a lone stream is
        always admitted); None while nothing is measured. With pages priced and a `newcomer`
        to add: the `live` streams and as many such newcomers as their outlook allows (the
        live ones alone, when even they fall short), searched for from `near` (the last
        answer: it moves little between asks, and each try judges every stream)."""
        if not self.calibrated:
            return None
        if self.page_s > 0 and newcomer is not None:
            streams = Streams.of(live)
            listeners = streams.listeners()
            extra = _most(
                lambda m: self.room_with(streams, Streams.like(newcomer, m)).ok,
                cap,
                near=None if near is None else near - listeners,
            )
            return max(1, listeners + (extra or 0))
        return _most(lambda n: self.room_for(n).ok, cap, least=1)

    def carries(self, live: StreamsLike, newcomer: StreamOutlook, n: int) -> bool:
        """Whether `n` streams stay in real time: the `live` ones and newcomers like
        `newcomer` up to n, by their outlook where pages are priced, else by the count."""
        if self.page_s > 0:
            streams = Streams.of(live)
            more = max(0, n - streams.listeners())
            return self.room_with(streams, Streams.like(newcomer, more)).ok
        return self.room_for(n).ok

    def codec_load(self, streams: int) -> float | None:
        """Predicted share of real time the codec is busy with `streams` streams (threaded
        codec; None otherwise, or while unmeasured)."""
        if not self.threaded_codec:
            return None
        chunk_s = self.chunk_tokens * self.seconds_per_token
        return self.codec.busy_share(streams, self.max_detok_batch, chunk_s)

    def room_with(self, live: StreamsLike, newcomers: StreamsLike) -> Admission:
        """Whether the `live` streams and the `newcomers` all stay in real time: by their
        outlook where pages are priced (and the codec's budget), else by their count
        (`room_for`). Streams without a listener among them count at their share (a batch
        request at its floor is a quarter of a stream); a lone listener is always admitted."""
        everyone = Streams.of(live).plus(Streams.of(newcomers))
        streams = everyone.listeners()
        unheard = everyone.share[~everyone.listened].sum()
        load = math.ceil(unheard - 1e-9) + streams
        if streams <= 1:
            return Admission(True)
        if self.page_s <= 0:
            return self.room_for(load)
        turn = self._turn_model()
        if turn is None:
            return Admission(True)
        inputs = OutlookInputs(
            everyone,
            turn,
            REALTIME_LOAD * self.seconds_per_token,
            self.lead_cap_s,
            OUTLOOK_END_STEP,
            self.floor_s(),
        )
        short = inputs.shortfall()
        if short is not None:
            return Admission(
                False,
                f"no real-time capacity: with {streams} streams"
                f"{_beside(len(everyone) - streams)} one would run {short.behind_s:.2f} s "
                f"short of audio {short.after_s:.0f} s from now, as their contexts grow "
                f"(measured turn costs, {1e6 * self.page_s:.2f} µs a KV page); try again "
                "shortly",
                RefusalCause.TURN_COST,
                inputs,
            )
        return self._codec_verdict(load)

    def _turn_model(self) -> TurnModel | None:
        if not self.calibrated:
            return None
        fit = self.steps.fit()
        line = None if fit is None else (fit.fixed_s, fit.per_unit_s)
        return TurnModel(
            self.steps.predict_rows, self.page_s, self.page_tokens, self.max_num_seqs, line
        )

    def room_for(self, streams: int) -> Admission:
        """Whether `streams` streams (the newcomer included) all stay in real time. A lone
        stream is always admitted: it pushes no one behind, and it is the best the engine can
        do (the warm-up logs a warning when even one stream cannot keep up)."""
        if streams <= 1:
            return Admission(True)
        limit = REALTIME_LOAD * self.seconds_per_token
        interval = self.token_interval(streams)
        if interval is not None and interval > limit:
            return Admission(
                False,
                f"no real-time capacity: {streams} streams would get a token every "
                f"{1000 * interval:.1f} ms (measured turn costs) for "
                f"{1000 * self.seconds_per_token:.1f} ms of audio each; try again shortly",
                RefusalCause.TURN_COST,
            )
        return self._codec_verdict(streams)

    def _codec_verdict(self, streams: int) -> Admission:
        load = self.codec_load(streams)
        if load is not None and load > REALTIME_LOAD:
            return Admission(
                False,
                f"no real-time capacity: the codec would be busy {100 * load:.0f} % of real "
                f"time decoding {streams} streams (measured job costs); try again shortly",
                RefusalCause.CODEC,
            )
        return Admission(True)


def _beside(unheard: int) -> str:
    """A refusal's note of the requests without a listener counted beside the streams."""
    return f" (beside {unheard} requests without a listener)" if unheard else ""


def _most(
    fits: Callable[[int], bool], cap: int, least: int = 0, near: int | None = None
) -> int | None:
    """The largest n in [least, cap] for which `fits(n)` (True up to some n, False after);
    None when not even `least` fits. `near`: a guess, searched out from in steps that double
    (a guess close to the answer takes a few tries, where a search from `least` takes
    about twice log2 of the answer)."""
    if near is None or not least < near <= cap:
        if not fits(least):
            return None
        lo, hi = least, max(2 * least, 1)
        while hi <= cap and fits(hi):
            lo, hi = hi, 2 * hi
        hi = min(hi, cap + 1)
    elif fits(near):
        lo, step = near, 1
        while lo + step <= cap and fits(lo + step):
            lo, step = lo + step, 2 * step
        hi = min(lo + step, cap + 1)
    else:
        hi, step = near, 1
        while hi - step > least and not fits(hi - step):
            hi, step = hi - step, 2 * step
        lo = hi - step
        if lo <= least:
            if not fits(least):
                return None
            lo = least
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
