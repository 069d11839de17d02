"""Real-time admission's feedback guard (no torch): whether the listeners already playing are
running short of audio, whatever the cost model predicts.

The cost model (engine/turn_cost.py) sees the engine loop's turns; it cannot see work it
does not time, nor a cost that grows faster than the line it fits. The listeners' buffers
see all of it (from the gateway's playback reports where the client sends them). A stream
counts once it has played for `SETTLED_AFTER_S` (before that it holds its first chunk's
cover, short by design). Its lead is the audio generated for it and not yet played, tokens
waiting for a chunk or in a codec job in flight included (Request.undecoded_tokens: the
chunk-by-chunk sawtooth of the audio delivered does not count; a job's chunk only once the
audio delivered outlasts a job, since a listener that runs dry first is short whatever the
job brings); it is short below the cover the scheduler gives a first chunk
(Scheduler.first_chunk_cover_s: the time to make the next chunk, times the first-audio
margin), since a healthy stream starts with that much and only gains: one below it has lost
ground (Scheduler.guard_short_below_s; this "short" is not the scheduler's contention, a
listener under `urgent_buffer_s` or waiting for its first chunk). A stream whose first chunk
was let out with less (the first-audio budget ran out, under load) is short below its first
chunk's audio. (A fixed line does not fit every model: voxgate-tiny's 3-token chunks start a
stream with ~0.15 s, Orpheus's with ~1 s.) No newcomer is admitted

- beyond half the streams the cost model predicts, or twice the most streams heard playing
  at once (audio out) in the last `CARRIED_WINDOW_S`, or `SLOW_START_STREAMS`, whichever is
  more (slow start; a few streams are the cost model's alone to judge): a
  prediction made before its streams' audio flowed is trusted halfway, and doubled as they
  are heard. The warm-up's figures, and the turns before a burst's audio flows, miss the
  work that comes with the audio (the gateway's encoding on the same cores: on a 2-core
  CPU, 43 voxgate-tiny streams predicted where ~20 play on time). A steady load, however
  it churns, has been heard: only a burst beyond what was recently carried meets it;
- while more than `SHORT_SHARE` of the settled streams are short, or
- while any is short, or was in the last `STRAIN_MEMORY_S`, and a stream admitted earlier
  has not settled yet (with settled streams playing: their buffers are the ones at stake):
  under strain, newcomers go in one at a time, each judged by buffers that have felt the
  last one (a burst of arrivals, or of retries, must not all go in on one view of the
  buffers, the moment the last short listener has caught up). A newcomer that only takes
  the place of a stream that ended, with fewer streams than were heard playing at once
  lately, adds nothing the listeners have not carried and goes in: a steady load of tens
  of arrivals a second always has some stream unsettled, and among hundreds of streams one
  dipping under the cover and back is ordinary, not a sign the engine is behind. Growth
  beyond what was carried still goes one at a time, and many short listeners are the share
  rule's.

What it cannot do: a buffer only runs short some time after the engine fell behind (2 s of
lead drain in 10 s at 20 % over), so while the model is far too hopeful and arrivals come
slowly, streams admitted meanwhile can still end up behind (voxbench/realtime_sim.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.refusal_causes import RefusalCause
from engine.stream_columns import StreamColumns

SETTLED_AFTER_S = 1.0
SHORT_SHARE = 0.05
STRAIN_MEMORY_S = 1.0
CARRIED_WINDOW_S = 10.0
SLOW_START_STREAMS = 4


@dataclass(frozen=True)
class ListenerHealth:
    settled: int = 0  # generating streams that have played for SETTLED_AFTER_S
    short: int = 0  # ... of them, those whose lead is short
    unsettled: int = 0  # generating streams not settled yet (no audio yet included)
    playing: int = 0  # generating streams with audio out (settled or not)
    # The short stream furthest under its line: (its lead, its line), seconds; refusals name
    # them, so that a run's refusals say how far short the guard saw its listeners.
    shortest: tuple[float, float] | None = None


def health_of(
    streams: StreamColumns,
    now: float,
    short_below_s: float,
    token_s: float,
    codec_s: float = 0.0,
) -> ListenerHealth:
    """The generating `streams`' leads at `now` (gathered then: engine/stream_columns.py;
    `token_s`: a token's audio); short: less than `short_below_s`. A chunk in a codec job
    counts once the audio delivered outlasts the job (`codec_s`, a job's time): a listener
    that would run dry before it comes out is short whatever the job brings."""
    since = streams.playing_since
    playing = ~np.isnan(since)
    with np.errstate(invalid="ignore"):
        settled = playing & (now - since >= SETTLED_AFTER_S)
    delivered = streams.lead_s
    tokens = np.where(delivered >= codec_s, streams.undecoded_tokens, streams.waiting_tokens)
    lead = delivered + tokens * token_s
    # A first chunk let out early (the first-audio budget) starts the stream lower.
    first = streams.first_chunk_s
    line = np.minimum(short_below_s, np.where(first > 0, first, short_below_s))
    short = settled & (lead < line)
    shortest = None
    if short.any():
        under = np.where(short, lead - line, np.inf)
        i = int(np.argmin(under))
        shortest = (float(lead[i]), float(line[i]))
    count = int(np.count_nonzero(settled))
    return ListenerHealth(
        count,
        int(np.count_nonzero(short)),
        len(streams) - count,
        int(np.count_nonzero(playing)),
        shortest,
    )


def _shortest_text(shortest: tuple[float, float] | None) -> str:
    """A refusal's note of how far short the guard saw a listener."""
    if shortest is None:
        return ""
    lead, line = shortest
    return f" (the furthest short held {lead:.2f} s of audio, under its {line:.2f}-s line)"


class ListenerGuard:
    """The guard's verdict, with its memory of the last strain."""

    def __init__(self) -> None:
        self.strained_at: float | None = None  # when a settled stream was last seen short
        self.strained_by: tuple[float, float] | None = None  # then: ListenerHealth.shortest
        # The most streams heard playing at once lately (a running maximum, restarted from
        # the present once CARRIED_WINDOW_S old), and when it was seen.
        self.carried = 0
        self.carried_at = 0.0

    def refusal(
        self, health: ListenerHealth, now: float, carries: Callable[[int], bool] | None = None
    ) -> tuple[str, str] | None:
        """Why no newcomer may go in now (a cause for metrics: `slow_start` or `listeners`,
        and words), or None; `carries(n)`: whether the cost model says the engine carries n
        streams (None: not measured). Asked once, at twice the streams: the slow start's
        question is whether the streams are at most half what the model carries."""
        if health.short:
            self.strained_at, self.strained_by = now, health.shortest
        if health.playing >= self.carried or now - self.carried_at > CARRIED_WINDOW_S:
            self.carried, self.carried_at = health.playing, now
        streams = health.settled + health.unsettled
        # streams >= predicted // 2, for the most streams `predicted` the model carries.
        if (
            carries is not None
            and streams >= max(SLOW_START_STREAMS, 2 * self.carried)
            and not carries(2 * streams + 2)
        ):
            return (
                RefusalCause.SLOW_START,
                f"{streams} streams where at most {self.carried} have been heard playing at "
                "once: more go in as they are heard",
            )
        if health.short > SHORT_SHARE * health.settled:
            return (
                RefusalCause.LISTENERS,
                f"{health.short} of the {health.settled} streams playing are running short "
                f"of audio{_shortest_text(health.shortest)}",
            )
        strained = self.strained_at is not None and now - self.strained_at < STRAIN_MEMORY_S
        if strained and health.settled and health.unsettled and streams >= self.carried:
            return (
                RefusalCause.LISTENERS,
                f"listeners ran short of audio {now - self.strained_at:.1f} s ago"
                f"{_shortest_text(self.strained_by)} and {health.unsettled} newer stream(s) "
                "have not settled yet",
            )
        return None
