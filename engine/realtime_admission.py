"""Real-time admission: refuse a stream rather than let the listeners already served fall
behind (no torch).

One more stream is admitted when two judges agree:

- the turn cost (engine/realtime_capacity.py): every live stream's outlook to its end
  (engine/realtime_outlook.py: its context, the tokens it may still make, the audio it holds),
  with the newcomer's, priced by the cost of a decode turn fitted at warm-up and from live
  turns (rows, and KV pages read where they are priced), and by the codec's time;
- the listeners' buffers (engine/listener_guard.py), which see what the fit cannot: the
  gateway or another process taking the cores, a codec slower than measured.

A stream's length in the outlook is the bound learned from the texts that stopped by
themselves (engine/speech_lengths.py), not its max_tokens. A request no one plays as it is
made (SpeechRequest.realtime False) is never refused: it counts in the outlook at its floor's
share (UNHEARD_FLOOR_RATE), the room it takes from the listeners while it runs.

The scheduler owns one (Scheduler.admission) and asks it at each admit; it reads the
scheduler's live requests and timing through the `ListenerLedger` protocol.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Protocol

import numpy as np

from engine.config import EngineConfig
from engine.listener_guard import ListenerGuard, ListenerHealth, health_of
from engine.outputs import AdmissionStats
from engine.realtime_capacity import RealtimeCapacity
from engine.realtime_outlook import StreamOutlook, Streams
from engine.refusal_causes import Admission
from engine.request import Request, RequestStatus, SamplingParams
from engine.speech_lengths import SpeechLengths
from engine.stream_columns import StreamColumns, gather

log = logging.getLogger("voxgate.engine")

# A request without a listener yields to listeners short of audio, but not for ever: once the
# audio its tokens make falls below this share of the time since it came, it decodes after
# the listeners even while one is short (Scheduler._behind_floor). Under a steady stream of
# arrivals some listener is always short (a newcomer waits for its first chunk), so without a
# floor a batch job would never finish on a busy server; at a quarter of real time it takes at
# most ~4× its audio's length there, and as a real-time stream it costs a quarter of one.
UNHEARD_FLOOR_RATE = 0.25

# How long stats reuse real-time admission's view where it judges outlooks (view).
ADMISSION_VIEW_S = 0.25


class ListenerLedger(Protocol):
    """What admission reads of the scheduler: its live requests (in arrival order), the
    codec's measured job time and the line under which a settled listener counts short."""

    requests: dict[str, Request]
    detok_time_s: float

    def guard_short_below_s(self) -> float: ...

    def frame_floor_s(self) -> float: ...


class RealtimeAdmission:
    def __init__(
        self,
        config: EngineConfig,
        ledger: ListenerLedger,
        seconds_per_token: float,
        chunk_tokens: int,
        block_size: int,
        threaded_codec: bool,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.seconds_per_token = seconds_per_token
        # The turn cost by rows: seeded at warm-up, fitted from every live decode turn.
        self.capacity = RealtimeCapacity(
            seconds_per_token,
            chunk_tokens,
            config.max_num_seqs,
            config.max_detok_batch,
            threaded_codec,
            block_size,
            min(config.contended_lead_s, config.max_lead_s),
            ledger.frame_floor_s,
        )
        # How long a text's speech runs, learned from requests that stopped by themselves.
        # Short texts get half a second of audio as slack.
        self.lengths = SpeechLengths(slack_tokens=math.ceil(0.5 / seconds_per_token))
        self.listener_guard = ListenerGuard()
        self.calibrating = False  # the core's warm-up measures costs: nothing is refused
        # The warm-up's decode turns (rows, seconds, KV pages), measured as live turns are: the
        # warm-up reads them (engine/warm_up_calibration.py) instead of the fit.
        self.calibration_turns: list[tuple[int, float, int]] = []
        # Requests refused, by cause (engine/refusal_causes.py), and whether the last one asked
        # was admitted (a change of mind is logged once).
        self.refusals: dict[str, int] = {}
        self._admitting = True
        # (when, refusal cause, figures): the view stats reuse (view)
        self._view: tuple[float, str, AdmissionStats] | None = None
        self._last_room: int | None = None  # where the next room's search starts (_room)

    # --- what the engine measures ----------------------------------------------------------------
    def observe_turn(self, rows: int, seconds: float, kv_pages: int) -> None:
        """A decode-only turn's seconds at its rows: a sample of the turn cost, or while the
        warm-up calibrates, one of its bursts' (calibration_turns)."""
        if self.calibrating:
            self.calibration_turns.append((rows, seconds, kv_pages))
        else:
            self.capacity.observe_turn(rows, seconds, kv_pages)

    def observe_finished(self, request: Request) -> None:
        """A request the LLM is done with: one that a stop token ended teaches its text's
        speech length (the model chose it, past any min_tokens); one held to max_tokens, or a
        warm-up's, teaches nothing."""
        if request.status == RequestStatus.FINISHED_STOPPED and not self.calibrating:
            self.lengths.observe(request.text_chars, len(request.output_ids))

    def observe_codec_job(self, audio_s: float, seconds: float) -> None:
        """A threaded codec's steady job: `audio_s` of audio in `seconds` (the codec's budget)."""
        self.capacity.codec.observe(audio_s, seconds)

    @property
    def counts_pages(self) -> bool:
        """Whether the KV pages a turn reads matter: priced, or the warm-up measuring them."""
        return self.capacity.page_s > 0 or self.calibrating

    def forget_warm_up(self) -> None:
        """The warm-up's own turns (first-use compiles) say nothing about serving, and a
        request it could not fit refused no client."""
        self.capacity.clear_live()
        self.refusals.clear()

    def count_refusal(self, cause: str) -> None:
        self.refusals[cause] = self.refusals.get(cause, 0) + 1

    # --- the verdict -----------------------------------------------------------------------------
    def judge(self, request: Request) -> Admission:
        """The verdict on `request`, counted and logged (what Scheduler.admit asks)."""
        verdict = self.verdict(request.arrival_time, request)
        self._note(verdict, request.arrival_time)
        return verdict

    def verdict(self, now: float, request: Request | None = None) -> Admission:
        """Whether every stream stays in real time with one more (`request`, or one of the
        live streams' typical length). Judged by the turn cost over every stream's outlook
        to its end as contexts grow, so a burst of arrivals is cut at the size that would
        fall behind rather than after it has (streams admitted but not yet prefilled count
        too); then by the listeners' buffers."""
        if not self._judges(request):
            return Admission(True)
        return self._verdict(self._gather(now), now, request)

    def _judges(self, request: Request | None) -> bool:
        """Whether a verdict is asked of the streams: admission is on and not calibrating,
        and `request` (if any) has a listener (one without has no deadline: it runs in the
        room real-time streams leave)."""
        if not self.config.realtime_admission or self.calibrating:
            return False
        return request is None or request.realtime

    def _verdict(self, requests: StreamColumns, now: float, request: Request | None) -> Admission:
        live = requests.where(requests.realtime)
        streams = self._streams(requests)
        newcomer = self._newcomer(request, live, now)
        verdict = self.capacity.room_with(streams, [newcomer])
        if not verdict.ok:
            return verdict
        health = self._listener_health(live, now)
        carries = None
        if self.capacity.calibrated:
            carries = functools.partial(self.capacity.carries, streams, newcomer)
        refusal = self.listener_guard.refusal(health, now, carries)
        if refusal is not None:
            cause, why = refusal
            return Admission(False, f"no real-time capacity: {why}; try again shortly", cause)
        return Admission(True)

    def room(self, now: float) -> int | None:
        """The most streams admission predicts the engine carries now: the live ones and as
        many more of their typical length as fit (None while unmeasured). Where pages are
        priced, a bisection over the streams' outlooks (a few ms at hundreds of streams):
        stats ask through view."""
        return self._room(self._gather(now), now)

    def _room(self, requests: StreamColumns, now: float) -> int | None:
        live = requests.where(requests.realtime)
        newcomer = self._newcomer(None, live, now)
        room = self.capacity.capacity(self._streams(requests), newcomer, near=self._last_room)
        self._last_room = room
        return room

    def view(self, now: float) -> tuple[str, AdmissionStats]:
        """The verdict on one more stream (its refusal cause, "" when it would admit) and the
        figures, for stats, which go out every 50 ms from the loop's thread. Where KV pages
        are priced both judge every live stream's outlook (the room a bisection of such
        judgements), so the view is reused for ADMISSION_VIEW_S; each admission itself is
        judged fresh (judge)."""
        cached = self._view
        if (
            cached is not None
            and self.capacity.page_s > 0
            and 0 <= now - cached[0] < ADMISSION_VIEW_S
        ):
            return cached[1], cached[2]
        requests = self._gather(now)
        refusal = self._verdict(requests, now, None).cause if self._judges(None) else ""
        figures = self._stats(requests, now)
        self._view = (now, refusal, figures)
        return refusal, figures

    def stats(self, now: float) -> AdmissionStats:
        """Admission's figures for /metrics (EngineStats.admission), computed now."""
        return self._stats(self._gather(now), now)

    def _stats(self, requests: StreamColumns, now: float) -> AdmissionStats:
        live = requests.where(requests.realtime)
        fit = self.capacity.steps.fit()
        codec = self.capacity.codec.fit()
        health = self._listener_health(live, now)
        return AdmissionStats(
            streams=len(live),
            capacity_streams=self._room(requests, now) or 0,
            turn_fixed_s=fit.fixed_s if fit else 0.0,
            turn_per_row_s=fit.per_unit_s if fit else 0.0,
            turn_per_page_s=self.capacity.page_s,
            live_turns=self.capacity.steps.live_turns,
            codec_fixed_s=codec.fixed_s if codec else 0.0,
            codec_per_audio_s=codec.per_unit_s if codec else 0.0,
            settled_listeners=health.settled,
            short_listeners=health.short,
            tokens_per_char=self.lengths.tokens_per_char() or 0.0,
            length_samples=self.lengths.samples,
            refusals=dict(self.refusals),
        )

    # --- how it sees the streams -----------------------------------------------------------------
    def outlook(self, request: Request, now: float) -> StreamOutlook:
        """A live request as the outlook sees it (_streams)."""
        return self._streams(gather([request], now))[0]

    def _gather(self, now: float) -> StreamColumns:
        """The live requests' figures at `now`. From a copy: EngineCore.stats() asks from the
        gateway's thread while the engine's adds."""
        return gather(list(self.ledger.requests.values()), now)

    def _streams(self, requests: StreamColumns) -> Streams:
        """The engine's load as the outlook sees it: the listeners' streams, then the
        requests without one. Each: its context, the most tokens it may still make, and the
        audio it holds (played out, decoding or not yet decoded); a request without a
        listener holds none to keep up and counts at its floor's share (it makes at least
        UNHEARD_FLOOR_RATE of real time's tokens while listeners are short: its cost to
        them)."""
        heard = requests.realtime
        ordered = requests.where(np.concatenate([np.flatnonzero(heard), np.flatnonzero(~heard)]))
        heard = ordered.realtime
        expected = self._expected_tokens(ordered)
        audio = np.maximum(ordered.lead_s, 0.0) + ordered.undecoded_tokens * self.seconds_per_token
        return Streams(
            ordered.context_tokens,
            expected - ordered.generated,
            np.where(heard, audio, 0.0),
            np.where(heard, 1.0, UNHEARD_FLOOR_RATE),
        )

    def _listener_health(self, live: StreamColumns, now: float) -> ListenerHealth:
        """The `live` listeners' leads against the guard's line, a chunk in a codec job
        counted once their delivered audio outlasts a steady job."""
        ledger = self.ledger
        return health_of(
            live, now, ledger.guard_short_below_s(), self.seconds_per_token, ledger.detok_time_s
        )

    def _expected_tokens(self, requests: StreamColumns) -> np.ndarray:
        """The most tokens the outlook expects each of `requests` to make: its text's
        learned bound within [min_tokens, max_tokens], or max_tokens where there is none, or
        once it ran past it."""
        ceiling = requests.max_tokens
        bound = self.lengths.bounds(requests.text_chars)
        if bound is None:
            return ceiling
        bound = np.maximum(bound, requests.min_tokens)
        unbounded = (requests.text_chars <= 0) | (requests.generated >= bound)
        return np.where(unbounded, ceiling, np.minimum(bound, ceiling))

    def _newcomer(self, request: Request | None, live: StreamColumns, now: float) -> StreamOutlook:
        """The stream a newcomer would be: `request` itself, or (asked without one, for the
        metrics' room) the live streams' median prompt and length, or a default request's."""
        if request is not None:
            asked = gather([request], now)
            return StreamOutlook(
                int(asked.prompt_tokens[0]), int(self._expected_tokens(asked)[0]), 0.0
            )
        if not len(live):
            return StreamOutlook(0, SamplingParams().max_tokens, 0.0)
        return StreamOutlook(
            _median_low(live.prompt_tokens), _median_low(self._expected_tokens(live)), 0.0
        )

    def _note(self, verdict: Admission, now: float) -> None:
        """Count a refusal by cause; log when admission closes and when it opens again."""
        if not verdict.ok:
            self.count_refusal(verdict.cause)
        if verdict.ok == self._admitting:
            return
        self._admitting = verdict.ok
        streams = sum(1 for r in self.ledger.requests.values() if r.wants_tokens)
        fit = self.capacity.steps.fit()
        turn = (
            f"turn {1e3 * fit.fixed_s:.2f} ms + {1e3 * fit.per_unit_s:.3f} ms/row"
            if fit
            else "turn cost not measured"
        )
        if verdict.ok:
            log.info(
                "real-time admission open again: %d streams, room for %s (%s)",
                streams,
                self.room(now),
                turn,
            )
        else:
            log.info(
                "real-time admission closed at %d streams (%s): %s", streams, turn, verdict.reason
            )


def _median_low(values: np.ndarray) -> int:
    """statistics.median_low of `values` (not empty)."""
    return int(np.sort(values)[(len(values) - 1) // 2])
