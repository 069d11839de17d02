"""Real-time admission's prediction (no torch): the token interval `n` streams would get from
the engine's measured turn cost, and the codec's budget where it runs beside the LLM, so that
a stream is refused *before* it would push the streams already playing behind real time.

A stream gets one token per LLM step it takes part in. With `n` streams and at most
`max_num_seqs` per step, each stream waits ceil(n / max_num_seqs) turns of
min(n, max_num_seqs) rows between tokens; that interval must stay under `REALTIME_LOAD` of a
token's playback time. This is the sustained-throughput condition whatever the lead caps do:
streams that sit out a step catch up in a later one, and a turn of r rows yields r tokens
for a + c*r seconds, which is best at r = n. The turn's cost by rows is fitted from live turns
(engine/turn_cost.py). A codec that runs beside the LLM (a thread of its own, on CUDA) has
its own budget: every stream needs a second of audio a second, in jobs of at most
`max_detok_batch` rows of a chunk each, and a job costs a fixed part plus a part per second
of audio it makes (`CodecCost`), so the codec's busy share grows with the streams and must
stay under `REALTIME_LOAD`. Both predictions never fall as streams are added, so the most
streams that fit (`capacity`, the metrics' room) is found by bisection. Where nothing is
measured at all, the model cannot be judged and admission leaves it to the KV pool (and the
listeners' buffers: engine/listener_guard.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from engine.turn_cost import LIVE_WINDOW, CostLine, SampleWindow, TurnCostModel, weighted_line

# A stream is refused once the predicted token interval exceeds this share of a token's
# playback time: the rest is margin for jitter. The turns it is predicted from are measured
# live, the gateway's work on the same machine included, and the listeners' buffers guard
# what they miss, so the margin is small: where a turn's fixed cost is half a token's time
# (a GPU), each 1 % of margin costs 2 % of the streams.
REALTIME_LOAD = 0.95


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    cause: str = ""  # for metrics: "turn_cost", "codec" (the scheduler adds more)

    @property
    def refusal_cause(self) -> str:
        """The cause a refusal is counted under; "" for an admission."""
        return "" if self.ok else self.cause


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
    ) -> None:
        self.seconds_per_token = seconds_per_token
        self.chunk_tokens = chunk_tokens
        self.max_num_seqs = max_num_seqs
        self.max_detok_batch = max_detok_batch
        self.threaded_codec = threaded_codec
        self.steps = TurnCostModel()  # a decode turn's seconds by rows
        self.codec = CodecCost()  # codec job seconds by audio made (threaded codec only)

    @property
    def calibrated(self) -> bool:
        return self.steps.measured

    def token_interval(self, streams: int) -> float | None:
        """Predicted seconds between a stream's tokens with `streams` streams generating."""
        batch = min(streams, self.max_num_seqs)
        cost = self.steps.predict(batch)
        if cost is None:
            return None
        return math.ceil(streams / self.max_num_seqs) * cost

    def capacity(self, cap: int = 100_000) -> int | None:
        """The most streams predicted to stay in real time (at least 1: a lone stream is
        always admitted); None while nothing is measured."""
        if not self.calibrated:
            return None
        lo, hi = 1, 2
        while hi <= cap and self.room_for(hi).ok:
            lo, hi = hi, 2 * hi
        hi = min(hi, cap + 1)
        while hi - lo > 1:  # room_for(lo) holds, room_for(hi) does not
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.room_for(mid).ok else (lo, mid)
        return lo

    def codec_load(self, streams: int) -> float | None:
        """Predicted share of real time the codec is busy with `streams` streams (threaded
        codec; None otherwise, or while unmeasured)."""
        if not self.threaded_codec:
            return None
        chunk_s = self.chunk_tokens * self.seconds_per_token
        return self.codec.busy_share(streams, self.max_detok_batch, chunk_s)

    def room_for(self, streams: int) -> Verdict:
        """Whether `streams` streams (the newcomer included) all stay in real time. A lone
        stream is always admitted: it pushes no one behind, and it is the best the engine can
        do (the warm-up logs a warning when even one stream cannot keep up)."""
        if streams <= 1:
            return Verdict(True)
        limit = REALTIME_LOAD * self.seconds_per_token
        interval = self.token_interval(streams)
        if interval is not None and interval > limit:
            return Verdict(
                False,
                f"no real-time capacity: {streams} streams would get a token every "
                f"{1000 * interval:.1f} ms (measured turn costs) for "
                f"{1000 * self.seconds_per_token:.1f} ms of audio each; try again shortly",
                "turn_cost",
            )
        load = self.codec_load(streams)
        if load is not None and load > REALTIME_LOAD:
            return Verdict(
                False,
                f"no real-time capacity: the codec would be busy {100 * load:.0f} % of real "
                f"time decoding {streams} streams (measured job costs); try again shortly",
                "codec",
            )
        return Verdict(True)
