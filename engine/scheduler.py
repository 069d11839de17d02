"""Deadline-aware scheduling of LLM steps and detokenizer chunks (no torch).

Each step `schedule(now)` decides (a) which requests advance the LLM — prefill chunks and
single-token decodes mixed under a token budget — and (b) which requests' buffered tokens go
to the detokenizer. Under every policy, requests more than `max_lead_s` ahead of their
listener are not decoded at all, nor are those with `max_undecoded_chunks` chunks of tokens
waiting for the codec (backpressure from a codec that falls behind). The policy orders the
rest, one rank (`_rank`) for the LLM and the codec alike:

- `fcfs`: earliest arrival first.
- `slack` (default): requests that have produced no audio yet (TTFA-critical) first, earliest
  due first (arrival, or the end of a held request's hold: SpeechRequest.audible_after_s);
  then the rest in ascending slack, where slack = audio buffered at the
  listener − time until this request's next chunk can be ready. A request with ample slack
  can be left out of a full batch without an audible gap, which is what frees room for new
  arrivals. While some listener is short of audio, streams more than `contended_lead_s` ahead
  sit out too (_lead_cap).

A request no one plays as it is made (SpeechRequest.realtime False: a file returned whole, a
batch job) has no deadline: it comes after every listener's stream (under `slack` it also sits
out while any listener is short of audio, unless it falls behind its floor), is never refused
by real-time admission (which counts it at its floor's share when it judges a listener), and
hands the codec its cheapest chunks.

A request is admitted (admit) once real-time admission finds room for it
(engine/realtime_admission.py: refuse rather than let the listeners fall behind) and its KV
pages are reserved for its whole length (prompt + max_tokens), so a running request never has
to be preempted: preempting a stream would be an audible gap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.outputs import ScheduledChunk, SchedulerOutput
from engine.realtime_admission import UNHEARD_FLOOR_RATE, RealtimeAdmission
from engine.refusal_causes import Admission, RefusalCause
from engine.request import Request, RequestStatus, Token

# How a request of a conversation may end and still leave its KV for the next turn.
_KEEPS_KV = (
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_CANCELLED,
)


def ema(old: float, new: float, weight: float = 0.2) -> float:
    """The running estimates' update (step cadence, codec time, second-chunk gap)."""
    return (1 - weight) * old + weight * new


# Past the first-audio budget a first chunk waits for the tokens that spare its listener a gap
# when the wait costs at most this many times the gap (Scheduler._closes_gap_soon).
GAP_WEIGHT = 2.0

# A chunk's way from the codec to its listener: the gateway's encode and send, which the
# listener's buffer (booked when the engine has the audio) does not see. A listener short of a
# full chunk gets the frames there are once waiting would leave it less than a codec job and
# this. In the simulator at an H200's costs, with each arrival taking 10 ms of the loop, the
# last arrivals of a 336-listener ramp ran late (12) where they had only the codec job's
# margin, 7 with this and SNAC's ramp at 1, none with both at 0.75 (docs/benchmark-history.md).
DELIVERY_ALLOWANCE_S = 0.04


@dataclass(frozen=True)
class MeasuredCosts:
    """The scheduler's running estimates of what a turn and a codec job take
    (Scheduler.measured_costs)."""

    step_time_s: float
    detok_time_s: float
    lane_time_s: float | None
    second_chunk_gap_s: float


@dataclass(frozen=True)
class ChunkingFacts:
    """The model facts the scheduler needs, without importing the model."""

    first_chunk_tokens: int
    chunk_tokens: int
    seconds_per_token: float
    frame_tokens: int = 1  # the smallest number of new tokens the codec can turn into audio
    # Tokens the codec holds back: the first chunk's audio is that much shorter than its
    # tokens (Orpheus: SNAC's decoder delay, 2.32 frames, rounded up to 17 tokens).
    held_back_tokens: int = 0
    # Tokens after a chunk that the codec reads before it decodes the chunk, as look-ahead
    # (CosyVoice 2's flow: 3). first_chunk_tokens includes them; its audio does not.
    lookahead_tokens: int = 0
    # The model's own first-audio margin with a threaded codec (ModelFacts), None: the engine's.
    first_audio_margin: float | None = None
    # ModelFacts.steady_batch_rows: with a lane, steady jobs wait for this many rows (0: never).
    steady_batch_rows: int = 0
    # ModelFacts.large_chunk_tokens: a cheaper chunk a comfortable listener waits for (0: none).
    large_chunk_tokens: int = 0

    @classmethod
    def from_facts(cls, facts: Any) -> ChunkingFacts:
        """The scheduler's part of a model's facts (models.base.ModelFacts, read by name so
        this module imports neither the model nor torch)."""
        return cls(
            first_chunk_tokens=facts.first_chunk_tokens,
            chunk_tokens=facts.chunk_tokens,
            seconds_per_token=facts.seconds_per_token,
            frame_tokens=facts.frame_tokens,
            held_back_tokens=facts.held_back_tokens,
            lookahead_tokens=facts.lookahead_tokens,
            first_audio_margin=facts.first_audio_margin,
            steady_batch_rows=facts.steady_batch_rows,
            large_chunk_tokens=facts.large_chunk_tokens or 0,
        )

    def first_chunk_audio_tokens(self, pending: int) -> int:
        """Tokens of audio the first detokenizer call makes from `pending` tokens (at least
        first_chunk_tokens): the first chunk, then whole frames after it, less the look-ahead
        the codec reads and the tokens it holds back."""
        first = self.first_chunk_tokens - self.lookahead_tokens
        decodable = pending - self.lookahead_tokens
        whole = first + (decodable - first) // self.frame_tokens * self.frame_tokens
        return whole - self.held_back_tokens


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        blocks: BlockManager,
        facts: ChunkingFacts,
        threaded_codec: bool = False,
        codec_would_emit: Callable[[Request], bool] | None = None,
        first_audio_s: Callable[[Sequence[Token], int], float | None] | None = None,
    ) -> None:
        self.config = config
        self.first_audio_margin = config.first_audio_margin_for(
            threaded_codec, facts.first_audio_margin
        )
        self.blocks = blocks
        self.facts = facts
        # Whether the codec would emit audio for a request given its pending tokens
        # (SpeechModel.codec_would_emit); None: any whole frame does.
        self.codec_would_emit = codec_would_emit
        # Seconds of audio a first job makes of a stream's first tokens and of a number of
        # tokens still to come, where the model's tokens do not all become audio at the facts'
        # rate (SpeechModel.first_chunk_audio_s); None: first_chunk_audio_tokens' rule.
        self.first_audio_s = first_audio_s
        self.steady_batch_rows = facts.steady_batch_rows
        # The tokens a request without a listener hands the codec at a time: the model's
        # cheapest chunk (large_chunk_tokens, else a full chunk), and for its first job at
        # least what a first chunk needs. Nobody waits for its audio, so fewer, fuller codec
        # calls only make the whole cheaper.
        self._unheard_chunk = max(facts.large_chunk_tokens, facts.chunk_tokens)
        self._unheard_first_chunk = max(self._unheard_chunk, facts.first_chunk_tokens)
        self.requests: dict[str, Request] = {}  # live requests, in arrival order
        self._reserved_blocks = 0
        self._holding_kv: set[str] = set()  # requests whose KV reservation is still held
        self.prefix_reused_tokens = 0  # prompt tokens whose KV a conversation had kept
        # Estimated wall time of one LLM step and one detokenizer call; the core reports its
        # measurements (observe_llm_turn, observe_codec_job).
        self.step_time_s = 0.02
        self.detok_time_s = 0.01
        # The first-chunk lane's job time (None: no lane job measured yet). A first chunk bound
        # for the lane is out after this, not after a steady job, so its first-audio budget
        # leaves it that much more time to build its cover.
        self.lane_time_s: float | None = None
        # Measured (engine clock): how long after a request's first chunk its second came out,
        # the gap a first chunk must cover. It takes in what the estimate from step and codec
        # times leaves out: waiting for a codec job already in flight, the async pipeline's
        # step of lag, a busy loop. 0 until a request has had two chunks.
        self.second_chunk_gap_s = 0.0
        # Whether one more stream keeps every listener in real time (engine/realtime_admission.py).
        self.admission = RealtimeAdmission(
            config,
            self,
            facts.seconds_per_token,
            facts.chunk_tokens,
            blocks.block_size,
            threaded_codec,
        )

    # --- what the core measures ------------------------------------------------------------------
    def observe_llm_turn(self, token_interval_s: float) -> None:
        """How long a running stream waited for this turn's token (the core's token
        interval): the step cadence that slack and the first chunk's cover are estimated with
        (step_time_s)."""
        self.step_time_s = ema(self.step_time_s, token_interval_s)

    def observe_codec_job(self, seconds: float, audio_s: float, lane: bool = False) -> None:
        """A finished codec job: its time and the seconds of audio it made, all rows. A lane
        job's time is the lane's estimate (lane_time_s) only, so the steady estimate (slack,
        cover, first-audio budget) stays the steady job's; a steady job's feeds detok_time_s
        and real-time admission's codec budget (threaded codecs)."""
        if lane:
            self.lane_time_s = (
                seconds if self.lane_time_s is None else ema(self.lane_time_s, seconds)
            )
            return
        self.detok_time_s = ema(self.detok_time_s, seconds)
        self.admission.observe_codec_job(audio_s, seconds)

    def observe_step(self, batch_size: int, interval_s: float, kv_pages: int = 0) -> None:
        """A decode-only turn's seconds at its rows, having read `kv_pages` KV pages (the core
        reports each): the samples real-time admission's turn cost is fitted to. While the
        warm-up calibrates they are its bursts' (calibration_turns)."""
        self.admission.observe_turn(batch_size, interval_s, kv_pages)

    def measured_costs(self) -> MeasuredCosts:
        """The running estimates the observe_* calls move, to put back with restore_costs
        (the warm-up's bursts must not move those that size first chunks and slack)."""
        return MeasuredCosts(
            self.step_time_s, self.detok_time_s, self.lane_time_s, self.second_chunk_gap_s
        )

    def restore_costs(self, costs: MeasuredCosts) -> None:
        """Put back estimates taken with measured_costs."""
        self.step_time_s, self.detok_time_s = costs.step_time_s, costs.detok_time_s
        self.lane_time_s, self.second_chunk_gap_s = costs.lane_time_s, costs.second_chunk_gap_s

    # --- admission and removal -------------------------------------------------------------------
    def _reservation(self, request: Request) -> int:
        return self.blocks.blocks_for(request.num_prompt_tokens + request.sampling.max_tokens)

    def admit(self, request: Request) -> Admission:
        """Reserve the request's whole length. Idle conversations' kept KV never stands in
        the way: it is evicted (least recently kept first) to make room. A request of a
        conversation starts with the KV of its prompt's common prefix with the kept one."""
        decision = self.admission.judge(request)
        if decision.ok:
            decision = self.blocks.can_admit(
                request.num_prompt_tokens + request.sampling.max_tokens, self._reserved_blocks
            )
            if not decision.ok:
                self.admission.count_refusal(RefusalCause.KV)
        if decision.ok:
            if request.conversation_id is not None:
                request.num_reused = self.blocks.claim(
                    request.conversation_id, request.request_id, request.prompt_ids
                )
                request.num_computed = request.num_reused
                self.prefix_reused_tokens += request.num_reused
            self._reserved_blocks += self._reservation(request)
            self.blocks.evict_for(self._reserved_blocks)
            self._holding_kv.add(request.request_id)
            self.requests[request.request_id] = request
        return decision

    def finish_generation(self, request: Request, status: RequestStatus) -> None:
        """The LLM is done with `request`: its KV pages go back to the pool at once. It stays
        live until the detokenizer has flushed its last audio."""
        request.status = status
        self.admission.observe_finished(request)
        self._release_kv(request)

    def remove(self, request_id: str) -> Request | None:
        request = self.requests.pop(request_id, None)
        if request is not None:
            self._release_kv(request)
        return request

    def _release_kv(self, request: Request) -> None:
        """Free the request's pages, or keep them for its conversation's next request: the
        tokens whose KV is computed and whose values are known (with async scheduling the
        newest may still be on the device: its KV is not kept)."""
        if request.request_id in self._holding_kv:
            self._holding_kv.discard(request.request_id)
            if request.conversation_id is not None and request.status in _KEEPS_KV:
                known = min(
                    request.num_computed, request.num_prompt_tokens + len(request.output_ids)
                )
                self.blocks.keep(
                    request.request_id, request.conversation_id, request.all_ids()[:known]
                )
            else:
                self.blocks.free(request.request_id)
            self._reserved_blocks -= self._reservation(request)
            request.block_table = []

    def end_conversation(self, conversation_id: str) -> None:
        """The conversation's kept KV is freed; a request of it still running frees its KV
        when it ends."""
        self.blocks.drop_kept(conversation_id)
        for request in self.requests.values():
            if request.conversation_id == conversation_id:
                request.conversation_id = None

    @property
    def reserved_blocks(self) -> int:
        return self._reserved_blocks

    @property
    def num_waiting(self) -> int:
        return sum(1 for r in self.requests.values() if r.status == RequestStatus.WAITING)

    @property
    def num_running(self) -> int:
        return sum(1 for r in self.requests.values() if r.status == RequestStatus.RUNNING)

    # --- priorities ------------------------------------------------------------------------------
    # Every order the scheduler makes (the LLM's steps, the codec's steady and lane jobs) ranks
    # requests with _rank: the policy's rank for a listener's stream, then requests without a
    # listener after all of them, in arrival order.
    def slack(self, request: Request, now: float) -> float:
        """Seconds the listener can wait before this request's next chunk would be late
        (without a listener, no chunk ever is)."""
        if not request.realtime:
            return math.inf
        return self._slack_of(
            request.buffered_audio_s(now), request.pending_detok_tokens, request.ttfa_critical
        )

    def _slack_of(self, buffered_s: float, pending: int, critical: bool) -> float:
        """slack from what it depends on, each read once by a caller that ranks every stream:
        the listener's buffered audio, the tokens waiting for the codec, and whether the
        request's first chunk is still to come."""
        need = (self.facts.first_chunk_tokens if critical else self.facts.chunk_tokens) - pending
        return buffered_s - (max(need, 0) * self.step_time_s + self.detok_time_s)

    def _priority(self, request: Request, now: float) -> tuple[int, float]:
        """_rank, reading the request's buffer and pending tokens now."""
        return self._rank(request, request.buffered_audio_s(now), request.pending_detok_tokens)

    def _rank(self, request: Request, buffered_s: float, pending: int) -> tuple[int, float]:
        """The sort key (lowest first) of every order: the policy's rank of a listener's stream
        (`buffered_s`: its listener's buffer, `pending`: its tokens waiting for the codec, read
        once by callers that rank every stream), and for a request without a listener a rank
        after all of them, in arrival order."""
        if not request.realtime:
            return (2, request.arrival_time)
        return self._listener_rank()(request, buffered_s, pending)

    def _listener_rank(self) -> Callable[[Request, float, int], tuple[int, float]]:
        """The policy's rank of a listener's stream (request, its buffer, its pending
        tokens), looked up once by _decode_order, which ranks every stream each turn."""
        if self.config.policy == "fcfs":
            return self._fcfs_rank
        return self._slack_rank

    @staticmethod
    def _fcfs_rank(request: Request, buffered_s: float, pending: int) -> tuple[int, float]:
        """The fcfs policy's rank of a listener's stream: earliest arrival first."""
        return (0, request.arrival_time)

    def _slack_rank(self, request: Request, buffered_s: float, pending: int) -> tuple[int, float]:
        """The slack policy's rank of a listener's stream: streams still waiting for their
        first audio first, by when their listener can hear it (arrival, or a held request's end
        of hold), then the rest by ascending slack. (A listener's stream: ttfa_critical is
        no audio yet.)"""
        if request.first_audio_time is None:
            return (0, request.audible_from)
        return (1, self._slack_of(buffered_s, pending, False))

    # --- the step ----------------------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        """The LLM part of a step."""
        out = SchedulerOutput()
        self._schedule_llm(now, out)
        return out

    def _schedule_llm(self, now: float, out: SchedulerOutput) -> None:
        # A request of streamed text that has used up its text waits for more (append_text).
        live = [r for r in self.requests.values() if r.wants_tokens and not r.awaits_text]
        chosen = self._decode_order(live, now, out)[: self.config.max_num_seqs]
        decodes: list[ScheduledChunk] = []
        unprefilled: list[Request] = []
        for request in chosen:
            if request.prefilled:  # a decode
                decodes.append(ScheduledChunk(request, request.num_computed, 1))
            else:
                unprefilled.append(request)
        # One token is set aside for every chosen decode, so that prefills of new arrivals can
        # never starve a request that is about to run dry.
        budget = self.config.max_batch_tokens
        prefills: list[ScheduledChunk] = []
        for request in unprefilled:
            room = budget - len(decodes)
            if room <= 0:
                break
            n = min(request.num_tokens - request.num_computed, room)
            prefills.append(ScheduledChunk(request, request.num_computed, n))
            budget -= n
        decodes = decodes[: max(budget, 0)]
        page = self.blocks.block_size
        for chunk in prefills + decodes:
            request = chunk.request
            end = chunk.start + chunk.num_tokens
            if end <= len(request.block_table) * page:
                continue  # its pages hold the new tokens already (most decode steps)
            # Cannot fail: admission reserved the request's whole length.
            if not self.blocks.ensure(request.request_id, end):
                raise RuntimeError("KV reservation violated: block pool ran out mid-request")
            request.block_table = self.blocks.table(request.request_id)
        out.chunks = prefills + decodes

    def _decode_order(self, live: list[Request], now: float, out: SchedulerOutput) -> list[Request]:
        """The `live` streams that may decode this step, ranked by _rank. Under every policy a
        stream past the lead cap (`max_lead_s`) or with `max_undecoded_chunks` chunks waiting
        for the codec sits out (counted in `out`: held_by_lead, held_by_codec; a stream still
        waiting for its first audio never does; _unheard_may_decode for those without a
        listener). Under
        slack, while some listener is short of audio (contended), the cap tightens to
        `contended_lead_s` (_lead_cap) and requests without a listener sit out too, unless they
        have fallen behind their floor (UNHEARD_FLOOR_RATE; counted with the lead cap's: they
        are ahead of any listener).

        This runs every turn for every stream, so each listener's buffer and pending tokens
        are read once, in one pass: at a few hundred streams these reads are most of the
        scheduler's host time, which with async scheduling is the turn's whenever the turn
        outlasts the LLM's step."""
        urgent = self.config.urgent_buffer_s
        someone_short = False
        reads: list[tuple[Request, float, int]] = []
        unheard: list[Request] = []
        for request in live:
            if not request.realtime:
                unheard.append(request)
                continue
            buffered_s = request.buffered_audio_s(now)
            reads.append((request, buffered_s, request.pending_detok_tokens))
            someone_short = someone_short or buffered_s < urgent or request.first_audio_time is None
        contended = someone_short and self.config.policy == "slack"  # slack's rules only
        lead = self._lead_cap(contended)
        undecoded = self.config.max_undecoded_chunks * self.facts.chunk_tokens
        rank = self._listener_rank()
        ranked: list[tuple[tuple[int, float], Request]] = []
        for request, buffered_s, pending in reads:
            if request.first_audio_time is not None:
                if pending >= undecoded:
                    out.held_by_codec += 1
                    continue
                if buffered_s > lead:
                    out.held_by_lead += 1
                    continue
            ranked.append((rank(request, buffered_s, pending), request))
        ranked.sort(key=itemgetter(0))
        order = [request for _, request in ranked]
        if contended:
            behind = [r for r in unheard if self._behind_floor(r, now)]
            out.held_by_lead += len(unheard) - len(behind)
            unheard = behind
        unheard.sort(key=lambda r: r.arrival_time)
        order += [r for r in unheard if self._unheard_may_decode(r, out)]
        return order

    def _unheard_may_decode(self, request: Request, out: SchedulerOutput) -> bool:
        """Whether a request without a listener may decode this step: not with two of its
        codec chunks (or `max_undecoded_chunks` chunks, if more) waiting (held_by_codec)."""
        undecoded = max(
            self.config.max_undecoded_chunks * self.facts.chunk_tokens, 2 * self._unheard_chunk
        )
        if request.pending_detok_tokens >= undecoded:
            out.held_by_codec += 1
            return False
        return True

    def _behind_floor(self, request: Request, now: float) -> bool:
        """Whether a request without a listener has made less audio than UNHEARD_FLOOR_RATE of
        the time since it came."""
        made_s = request.num_generated * self.facts.seconds_per_token
        return made_s < (now - request.arrival_time) * UNHEARD_FLOOR_RATE

    def _lead_cap(self, contended: bool) -> float:
        """How far ahead of its listener a stream may be and still decode this step
        (`contended`: whether some listener is short of audio, waiting for its first chunk or
        with less than `urgent_buffer_s` buffered).

        While contended, streams more than `contended_lead_s` ahead sit out: each step then
        carries fewer rows (and less KV to read) and comes round sooner for those who need it,
        at no loss to the comfortable streams. Otherwise every stream runs, up to `max_lead_s`,
        so a load with no one short (a batch of offline requests) runs at full speed."""
        if contended:
            return min(self.config.contended_lead_s, self.config.max_lead_s)
        return self.config.max_lead_s

    def _detok_ready(self, request: Request, now: float, codec_s: float | None = None) -> bool:
        """Whether `request` has a chunk to decode now; `codec_s`: the decode time of the job
        it would ride (default: a steady job's)."""
        if request.detok_done or request.detok_in_flight:
            return False
        if request.finished:
            return True  # flush whatever is left, even nothing: it closes the stream
        pending = request.pending_detok_tokens
        if request.awaits_text and pending >= self.facts.frame_tokens:
            # Streamed text ran out: no frame comes before more text does, so the frames the
            # text so far gave are decoded now rather than held for a chunk to fill.
            return True
        if not request.realtime:
            chunk = (
                self._unheard_first_chunk if request.num_detokenized == 0 else self._unheard_chunk
            )
            return pending >= chunk and (
                self.codec_would_emit is None or self.codec_would_emit(request)
            )
        if request.ttfa_critical:
            codec_s = self.detok_time_s if codec_s is None else codec_s
            return self._first_chunk_ready(request, now, codec_s)
        if pending >= self.facts.chunk_tokens:
            return pending >= self.facts.large_chunk_tokens or not self._can_wait_for_large(
                request, now
            )
        # Waiting for a full chunk would leave this listener without audio by the time it
        # reached it (a codec job and its way there): decode the whole frames there are now,
        # if the codec makes audio of them (codec_would_emit: frames still inside a codec's
        # look-ahead give none, and a request sent anyway sits out the next job for nothing;
        # SNAC lets out every frame past its look-ahead from a job handed less than a chunk).
        # Full chunks stay the rule while buffers are comfortable, since each codec call has
        # a fixed cost (a flow + HiFT window's context frames, SNAC's launches).
        return (
            pending >= self.facts.frame_tokens
            and self.slack(request, now) < self.detok_time_s + DELIVERY_ALLOWANCE_S
            and (self.codec_would_emit is None or self.codec_would_emit(request))
        )

    def _can_wait_for_large(self, request: Request, now: float) -> bool:
        """Whether the listener can wait for a large chunk (ModelFacts.large_chunk_tokens):
        its buffer, less the wait for the rest of it and its decode (with the first-audio
        margin), stays above the urgent buffer. The codec then pays its call's fixed cost once
        for more audio, so a frame costs less in a large chunk."""
        missing = self.facts.large_chunk_tokens - request.pending_detok_tokens
        if missing <= 0:
            return False
        wait = (missing * self.step_time_s + self.detok_time_s) * self.first_audio_margin
        return request.buffered_audio_s(now) - wait >= self.config.urgent_buffer_s

    def next_chunk_wait_s(self) -> float:
        """How long after a stream's first chunk its next one comes: the time to generate and
        decode it, from the measured token cadence and codec time, or the measured
        second-chunk gap when that is longer (it includes waiting for a codec job in flight and
        the async pipeline's lag, which the estimate alone leaves out)."""
        estimate = self.facts.chunk_tokens * self.step_time_s + self.detok_time_s
        return max(estimate, self.second_chunk_gap_s)

    def first_chunk_cover_s(self) -> float:
        """Audio the first chunk should hold: enough to play while the next chunk is generated
        and decoded, with a margin. The listener starts playing at the first frame (no client
        buffer), so a first chunk shorter than this is followed by a gap under load.

        Coupled: this is also real-time admission's line for a settled listener that has lost
        ground (guard_short_below_s), so a change here moves admission too."""
        return self.first_audio_margin * self.next_chunk_wait_s()

    def frame_floor_s(self) -> float:
        """The lead (tokens made and not yet played) under which a listener's next audio comes
        late: the codec makes audio of whole frames (past its look-ahead), and a frame's audio
        is out a codec job after its last token. Real-time admission's outlook keeps every
        listener's low points above it (engine/realtime_outlook.py)."""
        return self.facts.frame_tokens * self.facts.seconds_per_token + self.detok_time_s

    def guard_short_below_s(self) -> float:
        """The lead below which the listener guard counts a settled listener short
        (engine/listener_guard.py): the first chunk's cover, since a healthy stream starts
        with that much and only gains. Not the scheduler's contention (_decode_order: a
        listener under `urgent_buffer_s` or still waiting for its first chunk)."""
        return self.first_chunk_cover_s()

    def audio_out(self, request: Request, now: float, seconds: float) -> None:
        """Book a chunk of `seconds` of audio leaving for the listener; the second chunk of a
        request measures the gap its first had to cover."""
        if request.first_audio_time is None:
            request.first_audio_time = now
            request.first_chunk_s = seconds
        elif request.audio_chunks_out == 1 and request.realtime:
            gap = now - request.first_audio_time
            old = self.second_chunk_gap_s
            self.second_chunk_gap_s = gap if old == 0.0 else ema(old, gap)
        request.audio_chunks_out += 1
        request.audio_emitted_s += seconds

    def _first_chunk_ready(self, request: Request, now: float, codec_s: float) -> bool:
        """Whether a first chunk goes out now: once it covers the next chunk's wait with the
        margin, or once the first-audio budget is spent (the budget is for the audio to be
        out, so the codec's own time counts against it), unless a few more steps close a gap
        (_closes_gap_soon)."""
        pending = request.pending_detok_tokens
        if pending < self.facts.first_chunk_tokens:
            return False
        heard = self._first_chunk_heard_s(request, pending)
        if heard >= self.first_chunk_cover_s():
            return True
        past_budget_s = now - request.audible_from + codec_s - self.config.first_audio_budget_s
        if past_budget_s < 0:
            return False
        return past_budget_s >= self.next_chunk_wait_s() or not self._closes_gap_soon(
            request, pending, heard
        )

    def first_chunk_audio_s(self, request: Request, pending: int) -> float:
        """Seconds of audio the first job makes of a stream's first `pending` tokens: the
        model's own count where it has one, else the facts' rule (whole frames less the
        look-ahead and held-back tokens)."""
        if self.first_audio_s is not None:
            made = self.first_audio_s(request.output_ids[:pending], 0)
            if made is not None:
                return made
        return self.facts.first_chunk_audio_tokens(pending) * self.facts.seconds_per_token

    def _first_chunk_gain(self, request: Request, pending: int) -> Callable[[int], float]:
        """How much longer a first chunk of `pending` tokens plays at the listener if it waits
        for `extra` more tokens: by the model's own count where it has one (the tokens to come
        counted as its replies mix them; a codec that makes audio only at chunk edges gains
        nothing until the next edge), else by the facts' rule, a whole frame at a time."""
        if self.first_audio_s is not None:
            tokens = request.output_ids[:pending]
            made = self.first_audio_s(tokens, 0)
            if made is not None:
                count = self.first_audio_s
                rate = request.playback_rate
                return lambda extra: ((count(tokens, extra) or 0.0) - made) / rate
        rule = self.facts.first_chunk_audio_tokens
        token_s = self.facts.seconds_per_token / request.playback_rate
        return lambda extra: (rule(pending + extra) - rule(pending)) * token_s

    def _first_chunk_heard_s(self, request: Request, pending: int) -> float:
        """How long a first chunk made of `pending` tokens plays at the listener."""
        played = self.first_chunk_audio_s(request, pending) - request.delivery_hold_s
        return played / request.playback_rate

    def _closes_gap_soon(self, request: Request, pending: int, heard: float) -> bool:
        """Past the budget first audio matters more than the margin, but not more than the
        next chunk's wait itself: a first chunk shorter than that wait is followed by a gap
        however soon it goes out.
        Whether the chunk should wait for the tokens that close the gap: while tokens come
        faster than they play, and the wait costs at most GAP_WEIGHT times the gap it spares
        (a gap mid-speech is the worse silence: it cuts a word, and the stream is no longer
        in real time). A codec whose frames are long (CosyVoice 2's 25-token hop) would make
        a short gap cost a long wait: such a chunk goes now, and so does one whose codec makes
        audio only at chunk edges (Step-Audio 2's token2wav) or whose next tokens are text
        (GLM-4-Voice) when the audio that closes the gap is many steps away: the tokens to come
        are counted as the codec will make audio of them (_first_chunk_gain). Bounded by
        _first_chunk_ready to one such wait past the budget."""
        gap_s = self.next_chunk_wait_s() - heard
        token_s = self.facts.seconds_per_token / request.playback_rate
        if gap_s <= 0 or self.step_time_s >= token_s:
            return False
        gain = self._first_chunk_gain(request, pending)
        extra, left = 0, request.sampling.max_tokens - request.num_generated
        while gain(extra) < gap_s:
            extra += 1
            if extra > left or extra * self.step_time_s > GAP_WEIGHT * gap_s:
                # The stream ends first (its end flushes whatever it made), or the wait
                # already costs more than the gap it would spare.
                return False
        return extra * self.step_time_s <= GAP_WEIGHT * gap_s

    def schedule_detok(self, now: float) -> list[Request]:
        """The steady job's pick with the job free and no lane: a convenience for the tests and
        the simulator (the engine calls schedule_detok_jobs)."""
        return self.schedule_detok_jobs(now, steady_free=True).steady

    def schedule_detok_jobs(
        self, now: float, steady_free: bool, lane_room: int = 0, has_lane: bool = False
    ) -> DetokPlan:
        """The detokenizer part of a step, chosen after the LLM's tokens of the step are in, so
        a chunk completed by this step's token is decoded in this step. Up to `lane_room`
        requests (0: no lane, or its job is in flight) go out now as a lane job of their own,
        whether or not the steady job is free: first chunks first, then chunks whose listener
        would run dry waiting for a steady job (lane_urgent). The steady job, when
        `steady_free`, takes the rest that are ready (_detok_ready) in _rank's order, except
        first chunks that the lane (`has_lane`) would deliver sooner
        (first_chunk_waits_for_lane). A request is in at most one job
        (Request.detok_in_flight: _detok_ready), so its chunks come back in order whichever
        job takes them."""
        plan = DetokPlan()
        lane_s = self.detok_time_s if self.lane_time_s is None else self.lane_time_s
        if lane_room > 0:
            fresh, urgent = [], []
            for r in self.requests.values():
                if not self._detok_ready(r, now, lane_s):
                    continue
                if r.num_detokenized == 0 and r.ttfa_critical:
                    fresh.append(r)
                elif not r.ttfa_critical and self.lane_urgent(r, now):
                    urgent.append(r)
            fresh.sort(key=lambda r: self._priority(r, now))
            # Urgent chunks by how soon their listener runs dry, under every policy: the lane
            # is for deadlines (under slack this is _rank's order too).
            urgent.sort(key=lambda r: self.slack(r, now))
            plan.lane = (fresh + urgent)[:lane_room]
        if steady_free:
            taken = {id(r) for r in plan.lane}
            lane_first = has_lane and self.first_chunk_waits_for_lane(lane_s)
            ready = [
                r
                for r in self.requests.values()
                if id(r) not in taken
                and not (lane_first and r.num_detokenized == 0 and r.ttfa_critical)
                and self._detok_ready(r, now)
            ]
            ready.sort(key=lambda r: self._priority(r, now))
            if not (has_lane and self.steady_job_waits(ready, now)):
                plan.steady = ready[: self.config.max_detok_batch]
        return plan

    def steady_job_waits(self, ready: list[Request], now: float) -> bool:
        """Whether the steady job holds back its `ready` requests for more rows: fewer than
        steady_batch_rows are ready and none is due (a first chunk, or a listener whose audio
        would last less than twice the lane's urgency line, lane_urgent, with a margin of at
        least 1), and enough streams are live (generating, or ready) to fill the batch. So a
        held chunk goes out in a steady job well before it would need the lane, and under light
        load, or once no stream is generating, nothing waits.

        Why: a codec job whose cost hardly grows with its rows (CosyVoice 2's flow + HiFT:
        thousands of small kernels) is cheaper run as a few large jobs, which leave the GPU to
        the LLM in between, than as many small ones back to back. Only with a lane, which takes
        first chunks and any chunk that comes due while a large steady job runs."""
        if not ready or len(ready) >= self.steady_batch_rows:
            return False
        live = {id(r) for r in ready} | {id(r) for r in self.requests.values() if r.wants_tokens}
        if len(live) < self.steady_batch_rows:
            # Too few streams to fill a batch (light load, the codec mostly idle): waiting
            # would only thin the listeners' buffers. Also when none is generating any more.
            return False
        due_s = 4 * self.detok_time_s * max(self.first_audio_margin, 1.0)
        return all(
            not r.realtime or (not r.ttfa_critical and r.buffered_audio_s(now) >= due_s)
            for r in ready
        )

    def first_chunk_waits_for_lane(self, lane_s: float) -> bool:
        """Whether first chunks skip the steady job and wait for the lane: the lane delivers
        within the job it may have in flight plus its own (2 x `lane_s`), and a steady job
        that takes longer would hold the first audio back."""
        return self.detok_time_s >= 2 * lane_s

    def lane_urgent(self, request: Request, now: float) -> bool:
        """Whether a playing request's ready chunk belongs on the lane: its listener's buffer
        would not last, with the first-audio margin, through a steady job in flight and then
        its own (two steady jobs): a chunk that waits so comes late, and at the first-audio
        margin most second chunks take the lane (docs/benchmark-history.md has the runs that
        set it)."""
        if not request.realtime:
            return False
        return request.buffered_audio_s(now) < 2 * self.detok_time_s * self.first_audio_margin


@dataclass
class DetokPlan:
    """The detokenizer jobs to submit this step: a lane job (first and urgent chunks) and a
    steady one."""

    lane: list[Request] = field(default_factory=list)
    steady: list[Request] = field(default_factory=list)
