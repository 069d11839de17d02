"""Real-time admission's outlook (no torch): whether every stream keeps its listener in audio
until its end, when a decode turn's cost grows with the KV pages it reads.

A decode step reads every running stream's KV pages, so a turn costs a part by its rows
(weights, launches, the host's work: engine/turn_cost.py) plus a part by the pages in use
(`page_s` each, from the device's memory bandwidth: engine/memory_bandwidth.py). Each stream's
context grows by a token a step, so the turn grows as the streams age: on an H200 serving
Orpheus, 300 streams' turn went from ~7 ms at ~450 tokens each to ~14 ms at ~2,050, past the
~11.6 ms a real-time turn allows there, and the streams held only on the audio they banked
while their contexts were short (docs/benchmark-history.md). A count of streams cannot say
that; their contexts, the tokens they may still make and the audio they hold can:

- Every stream still making tokens takes one a round, as the scheduler runs them (with more
  streams than `max_num_seqs`, a round is rows / max_num_seqs full turns: every turn runs
  the most urgent, and a stream that sits out one runs in the next on its banked audio). In
  round k the streams whose remaining tokens are at least k run, each reading its context
  plus k tokens of pages, so a round's time is linear in k between two streams' ends (a
  segment).
- A listener's lead (the audio it holds, `banked_s` now) grows by a token's playback time
  (less admission's margin: `budget`) and shrinks by the round's time, and a stream banks at
  most `lead_cap_s` (the scheduler's lead cap while someone waits for a first chunk, as a
  newcomer does). Within a segment the change is linear and falling in k: the lead rises
  (clipped at the cap) until the rounds cost more than the budget, then falls, so its lowest
  point is at a segment's start or end, and a pass over the segments, all streams at once,
  finds every listener's lowest lead exactly.

A listener hears its audio in whole codec frames, each out a codec job after its last token:
so while its lead (tokens made and not yet played) is under a frame and a job, the next frame
cannot reach it in time, and the outlook counts a listener short below that `floor_s`. Its
low points are where its lead has been falling: not now (a newcomer starts with nothing
banked and gains until its first audio; a stream already thin is the listeners' guard's,
engine/listener_guard.py), and not a lead still rising. (At a stream's very end its last
tokens go out whether or not they fill a frame; a frame before it the floor holds, and the
lead then is hardly more.)

The remaining tokens are what the scheduler expects a request may still make: its text's
learned bound (engine/speech_lengths.py) or, without one, its `max_tokens`, less what it made.

A request without a listener (a file returned whole, a batch job) has no audio to keep up, but
it takes rows: while some listener is short it sits out unless it is behind its floor, so it
makes at least its `share` of a token a round (UNHEARD_FLOOR_RATE of real time:
engine/realtime_admission.py). The outlook counts it at that share: a share of a row and of its
pages in every round, its context growing a share of a token a round, until its remaining tokens
are made. That is the least it costs the listeners; while they are comfortable it runs every
turn and costs more, but then they bank audio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np


@dataclass(frozen=True)
class StreamOutlook:
    """One stream as the outlook sees it."""

    context_tokens: int  # prompt + tokens made: the KV a step reads for it
    remaining_tokens: int  # tokens it may still make
    banked_s: float  # audio made and not yet played (decoded or not), seconds
    # The share of rounds it makes a token in: 1 for a listener; less for a request without
    # one (no audio of its own to keep up: only its cost to the listeners counts).
    share: float = 1.0

    @property
    def listened(self) -> bool:
        return self.share >= 1.0


@dataclass(frozen=True)
class Streams:
    """Streams as the outlook sees them, one array a figure (a StreamOutlook's, one entry a
    stream): what the outlook works on, all streams at once. Admission builds them from its
    live requests in one pass (engine/stream_columns.py), not a StreamOutlook each, since it
    judges every stream at each arrival."""

    context_tokens: np.ndarray  # int64
    remaining_tokens: np.ndarray  # int64
    banked_s: np.ndarray  # float64
    share: np.ndarray  # float64

    @classmethod
    def of(cls, streams: StreamsLike) -> Streams:
        """`streams` as columns (as they are, if they are already)."""
        if isinstance(streams, Streams):
            return streams
        rows = [(s.context_tokens, s.remaining_tokens, s.banked_s, s.share) for s in streams]
        if not rows:
            return cls.like(StreamOutlook(0, 0, 0.0), 0)
        context, remaining, banked, share = zip(*rows, strict=True)
        return cls(
            np.array(context, dtype=np.int64),
            np.array(remaining, dtype=np.int64),
            np.array(banked, dtype=np.float64),
            np.array(share, dtype=np.float64),
        )

    @classmethod
    def like(cls, stream: StreamOutlook, count: int) -> Streams:
        """`count` streams like `stream`."""
        return cls(
            np.full(count, stream.context_tokens, dtype=np.int64),
            np.full(count, stream.remaining_tokens, dtype=np.int64),
            np.full(count, stream.banked_s, dtype=np.float64),
            np.full(count, stream.share, dtype=np.float64),
        )

    def plus(self, other: Streams) -> Streams:
        """These streams, then `other`'s."""
        return Streams(
            np.concatenate([self.context_tokens, other.context_tokens]),
            np.concatenate([self.remaining_tokens, other.remaining_tokens]),
            np.concatenate([self.banked_s, other.banked_s]),
            np.concatenate([self.share, other.share]),
        )

    @property
    def listened(self) -> np.ndarray:
        """Whether each stream has a listener (StreamOutlook.listened)."""
        return self.share >= 1.0

    def listeners(self) -> int:
        return int(np.count_nonzero(self.listened))

    def __len__(self) -> int:
        return len(self.share)

    @overload
    def __getitem__(self, i: int) -> StreamOutlook: ...

    @overload
    def __getitem__(self, i: slice) -> Streams: ...

    def __getitem__(self, i: int | slice) -> StreamOutlook | Streams:
        """One stream, or the streams of a slice (as columns)."""
        if isinstance(i, slice):
            return Streams(
                self.context_tokens[i], self.remaining_tokens[i], self.banked_s[i], self.share[i]
            )
        return StreamOutlook(
            int(self.context_tokens[i]),
            int(self.remaining_tokens[i]),
            float(self.banked_s[i]),
            float(self.share[i]),
        )

    def __iter__(self) -> Iterator[StreamOutlook]:
        return (self[i] for i in range(len(self)))


# What the outlook takes: columns, or any sequence of single streams (tests, the simulator).
StreamsLike = Streams | Sequence[StreamOutlook]


@dataclass(frozen=True)
class Shortfall:
    """The worst listener the outlook sees running dry."""

    behind_s: float  # how much audio it would lack
    after_tokens: int  # after how many more tokens
    after_s: float  # how far from now


@dataclass(frozen=True)
class TurnModel:
    """A decode turn's seconds: `by_rows(rows)` (the part by its rows, for an array of row
    counts at once) + `page_s` a KV page in use, pages of `page_tokens` tokens; at most
    `max_rows` rows a turn."""

    by_rows: Callable[[np.ndarray], np.ndarray]
    page_s: float
    page_tokens: int
    max_rows: int
    # The fitted line under `by_rows` (fixed seconds, seconds a row), without the floors that
    # turns measured at smaller sizes set (engine/turn_cost.py): recorded, so that a replay can
    # tell what the floors cost (bench/replay_refusals.py). None where there is none.
    line_s: tuple[float, float] | None = None


@dataclass(frozen=True)
class OutlookInputs:
    """What one judgement of the outlook read: kept with a refusal, so that a trace of the
    refused request (engine/request_trace.py) says what decided it and can be judged again
    offline with one input changed (bench/replay_refusals.py)."""

    streams: StreamsLike  # the live streams, then the newcomers
    turn: TurnModel
    budget_s: float
    lead_cap_s: float
    end_step: int
    floor_s: float = 0.0  # the lead under which a listener's next frame comes late

    def shortfall(self) -> Shortfall | None:
        return shortfall(
            self.streams, self.turn, self.budget_s, self.lead_cap_s, self.end_step, self.floor_s
        )

    def to_record(self) -> dict[str, Any]:
        """Plain data for a JSON line: the turn's part by rows at every row count from 1 to
        `max_rows` (the fitted line, its floors and its reach as predicted: a listener's row is
        whole, so nothing between is needed but for requests without a listener, which the
        replay interpolates), each stream as [context, remaining, banked_s, share]. Written
        right after the judgement, on the engine's thread, whose turns alone move the model."""
        rows = np.arange(1, self.turn.max_rows + 1, dtype=np.float64)
        by_rows = self.turn.by_rows(rows)
        return {
            "budget_s": self.budget_s,
            "lead_cap_s": None if math.isinf(self.lead_cap_s) else self.lead_cap_s,
            "end_step": self.end_step,
            "floor_s": self.floor_s,
            "page_s": self.turn.page_s,
            "page_tokens": self.turn.page_tokens,
            "max_rows": self.turn.max_rows,
            "turn_by_rows_s": [round(float(seconds), 7) for seconds in by_rows],
            "turn_line_s": None if self.turn.line_s is None else list(self.turn.line_s),
            "streams": [
                [s.context_tokens, s.remaining_tokens, round(s.banked_s, 4), s.share]
                for s in Streams.of(self.streams)
            ],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> OutlookInputs:
        """The inputs `to_record` wrote (or, in the traces of bench/results dated 2026-12-07,
        the turn at a grid of row counts, `turn_by_rows`: [rows, seconds] pairs, interpolated
        between them, which misses a floor's step that falls between two)."""
        if "turn_by_rows_s" in record:
            seconds = np.array(record["turn_by_rows_s"], dtype=np.float64)
            rows = np.arange(1, len(seconds) + 1, dtype=np.float64)
        else:
            rows, seconds = np.array(record["turn_by_rows"], dtype=np.float64).T
        turn = TurnModel(
            lambda r: np.interp(r, rows, seconds),
            record["page_s"],
            record["page_tokens"],
            record["max_rows"],
            tuple(record["turn_line_s"]) if record.get("turn_line_s") else None,
        )
        streams = [StreamOutlook(int(c), int(r), b, s) for c, r, b, s in record["streams"]]
        cap = record["lead_cap_s"]
        return cls(
            streams,
            turn,
            record["budget_s"],
            math.inf if cap is None else cap,
            record["end_step"],
            record.get("floor_s", 0.0),  # traces written before the floor judged against 0
        )


def shortfall(
    streams: StreamsLike,
    turn: TurnModel,
    budget_s: float,
    lead_cap_s: float = math.inf,
    end_step: int = 1,
    floor_s: float = 0.0,
) -> Shortfall | None:
    """The largest lack of audio any listener among `streams` would see before its end,
    each stream making its share of a token a round (a listener one) against `budget_s` of
    playback a token, none banking more than `lead_cap_s` ahead (or its own bank, if
    larger); None if none runs short: below `floor_s` of lead at a low point (where its
    lead has been falling: the module's note says why). Ends are rounded up to a multiple of
    `end_step` rounds (fewer segments; a stream then counts as running a little longer,
    which errs on the safe side)."""
    columns = Streams.of(streams)
    going = columns.remaining_tokens > 0
    share = columns.share[going]
    listened = share >= 1.0
    if not listened.any():
        return None
    ends = np.ceil(columns.remaining_tokens[going] / share).astype(np.int64)
    ends = -(-ends // end_step) * end_step
    context = columns.context_tokens[going].astype(np.float64)
    lead = columns.banked_s[going]
    cap = np.maximum(lead, lead_cap_s)
    stops = np.unique(ends)
    starts = np.concatenate([[0], stops[:-1]])
    # Segment j: rounds (starts[j], stops[j]], run by the streams whose end is at least stops[j].
    running = ends[None, :] >= stops[:, None]
    rows = running @ share
    context_run = running @ (share * context)
    turns_a_round = np.maximum(rows / turn.max_rows, 1.0)
    by_rows = turns_a_round * turn.by_rows(np.minimum(rows, turn.max_rows))
    per_page = turn.page_s / turn.page_tokens
    # Round k of segment j takes a_j + b_j x k: its rows' part, the pages of the streams'
    # contexts plus their share of k tokens each, and half a page a stream for the page it is
    # filling, each stream by its share. A listener's lead changes by budget - (a_j + b_j x k):
    # rising while k < k0, then falling.
    a = by_rows + per_page * context_run + 0.5 * turn.page_s * rows
    b = per_page * (running @ (share * share))
    with np.errstate(divide="ignore", invalid="ignore"):
        k0 = np.where(b > 0, (budget_s - a) / b, np.where(a < budget_s, np.inf, -np.inf))
    turning = np.clip(np.ceil(k0) - 1, starts, stops)  # the last round that still gains
    gain = _rounds_sum(starts, turning, budget_s - a, -b)
    loss = _rounds_sum(turning, stops, budget_s - a, -b)
    elapsed = np.cumsum(_rounds_sum(starts, stops, a, b))
    # A running stream's lead after segment j is min(cap, lead before + gain_j) + loss_j: with
    # S_j the segments' gains and losses summed to j, that is S_j + min(its lead now,
    # cap + min over k <= j of (loss_k - S_k)), for every segment and stream at once.
    total = np.cumsum(gain + loss)
    lowest = np.minimum.accumulate(loss - total)
    leads = total[:, None] + np.minimum(lead[None, :], cap[None, :] + lowest[:, None])
    # A lead still rising at a segment's end is above where it was; one that fell into it is
    # a low point. A stream's low points are in the segments it runs in.
    low_point = running & listened[None, :] & (loss < 0)[:, None]
    margins = np.where(low_point, leads - floor_s, np.inf)
    worst_at = np.argmin(margins, axis=0)
    worst = margins[worst_at, np.arange(len(lead))]
    i = int(np.argmin(worst))
    if worst[i] >= 0:
        return None
    j = int(worst_at[i])
    return Shortfall(float(-worst[i]), int(stops[j]), float(elapsed[j]))


def _rounds_sum(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum over rounds k in (lo, hi] of a + b x k, elementwise (0 where hi <= lo)."""
    n = np.maximum(hi - lo, 0)
    return n * a + b * (lo + 1 + hi) * n / 2.0
