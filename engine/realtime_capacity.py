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
its own budget: every stream needs a chunk per chunk of audio, in jobs of at most
`max_detok_batch` rows. Where nothing is measured at all, the model cannot be judged and
admission leaves it to the KV pool (and the listeners' buffers: engine/listener_guard.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.turn_cost import TurnCostModel

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


class CostCurve:
    """Measured seconds by size (codec rows): a running mean per size."""

    def __init__(self, weight: float = 0.2) -> None:
        self.weight = weight
        self._cost: dict[int, float] = {}

    def observe(self, size: int, seconds: float) -> None:
        if size < 1 or seconds < 0:
            return
        old = self._cost.get(size)
        self._cost[size] = (
            seconds if old is None else (1 - self.weight) * old + self.weight * seconds
        )

    def set(self, size: int, seconds: float) -> None:
        """A calibrated figure, replacing what was observed at `size` so far."""
        self._cost[size] = seconds

    @property
    def sizes(self) -> list[int]:
        return sorted(self._cost)

    def predict(self, size: int) -> float | None:
        """The expected cost at `size`: measured, interpolated between the nearest sizes
        measured, or extrapolated past the largest. None: nothing measured."""
        sizes = self.sizes
        if not sizes:
            return None
        if size in self._cost:
            return self._cost[size]
        below = [s for s in sizes if s < size]
        above = [s for s in sizes if s > size]
        if below and above:
            lo, hi = below[-1], above[0]
            t = (size - lo) / (hi - lo)
            return self._cost[lo] + t * (self._cost[hi] - self._cost[lo])
        if above:  # smaller than anything measured: no dearer than the smallest
            return self._cost[above[0]]
        last = sizes[-1]
        if len(sizes) == 1:
            # One point: cost grows at most in proportion to size (pessimistic for a GPU,
            # whose small batches cost nearly the same).
            return self._cost[last] * size / last
        prev = sizes[-2]
        slope = max(0.0, (self._cost[last] - self._cost[prev]) / (last - prev))
        return self._cost[last] + slope * (size - last)


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
        self.codec = CostCurve()  # codec job seconds by rows (threaded codec only)

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

    def codec_period(self, streams: int) -> float | None:
        """Predicted codec seconds to give each of `streams` one chunk (threaded codec)."""
        if not self.threaded_codec:
            return None
        rows = min(streams, self.max_detok_batch)
        cost = self.codec.predict(rows)
        if cost is None:
            return None
        return math.ceil(streams / self.max_detok_batch) * cost

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
        chunk_s = self.chunk_tokens * self.seconds_per_token
        codec = self.codec_period(streams)
        if codec is not None and codec > REALTIME_LOAD * chunk_s:
            return Verdict(
                False,
                f"no real-time capacity: the codec would take {1000 * codec:.0f} ms to decode "
                f"a {1000 * chunk_s:.0f} ms chunk for each of {streams} streams; "
                "try again shortly",
                "codec",
            )
        return Verdict(True)
