"""Real-time admission's cost model (no torch): what a step costs at each batch size, and what
a codec job costs at each number of rows, measured at warm-up and refined from live steps, so
that a stream is refused *before* it would push the streams already playing behind real time.

A stream gets one token per LLM step it takes part in. With `n` streams and at most
`max_num_seqs` per step, each stream waits ceil(n / max_num_seqs) steps of batch
min(n, max_num_seqs) between tokens; that interval (loop time between step starts, the inline
codec's share and the host's work included) must stay under `REALTIME_LOAD` of a token's
playback time. A codec that runs beside the LLM (a thread of its own, on CUDA) has its own
budget: every stream needs a chunk per chunk of audio, in jobs of at most `max_detok_batch`
rows.

Where nothing is measured yet at or above the asked size, the cost is extrapolated from the
largest sizes measured (linearly, never cheaper than the largest measured); where nothing is
measured at all, the model cannot be judged and admission leaves it to the KV pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A stream is refused once the predicted token interval exceeds this share of a token's
# playback time: the rest is margin for the gateway's own work and jitter.
REALTIME_LOAD = 0.9


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


class CostCurve:
    """Measured seconds by size (batch size, codec rows): a running mean per size."""

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
        self.steps = CostCurve()  # token interval by decode batch size
        self.codec = CostCurve()  # codec job seconds by rows (threaded codec only)

    @property
    def calibrated(self) -> bool:
        return bool(self.steps.sizes)

    def token_interval(self, streams: int) -> float | None:
        """Predicted seconds between a stream's tokens with `streams` streams generating."""
        batch = min(streams, self.max_num_seqs)
        cost = self.steps.predict(batch)
        if cost is None:
            return None
        return math.ceil(streams / self.max_num_seqs) * cost

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
                f"{1000 * interval:.1f} ms (measured step costs) for "
                f"{1000 * self.seconds_per_token:.1f} ms of audio each; try again shortly",
            )
        chunk_s = self.chunk_tokens * self.seconds_per_token
        codec = self.codec_period(streams)
        if codec is not None and codec > REALTIME_LOAD * chunk_s:
            return Verdict(
                False,
                f"no real-time capacity: the codec would take {1000 * codec:.0f} ms to decode "
                f"a {1000 * chunk_s:.0f} ms chunk for each of {streams} streams; "
                "try again shortly",
            )
        return Verdict(True)
