"""The step loop: schedule → LLM step → detokenizer → events. Single-threaded by design; a
client runs it on a thread of its own (engine/client.py), in a process of its own
(engine/process_engine.py) or in a Ray actor (engine/ray_replica.py), the same way
(engine/loop.py).

Async scheduling (EngineConfig.async_scheduling, for models whose facts allow it): each step
launches LLM step n+1 before it resolves step n's tokens, so the host's work (scheduling,
input preparation, attention planning, the launch, applying tokens, detokenizer hand-offs)
runs while the device computes. A request whose newest token is still on the device gets it
as input there (Worker.launch); `Request.num_inflight` keeps positions right meanwhile.
Consequences, all handled here: max_tokens is known without token values (the scheduler
never launches past it); a stop token is seen one step late, so a stopped request has run
one extra step whose token is discarded; a cancelled request's in-flight token is dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from engine.api import EngineOverloaded
from engine.audio_out import AudioOut
from engine.backbone import build_backbone, on_llm_stream
from engine.config import EngineConfig
from engine.detok_job import Detokenizer
from engine.detok_pipeline import make_detokenizer
from engine.gc_pauses import with_full_collections
from engine.outputs import (
    MAX_AUDIBLE_AFTER_S,
    EngineEvent,
    EngineStats,
    FinishReason,
    LoopTotals,
    SchedulerOutput,
    SpeechRequest,
    StepTiming,
    TextDelta,
    WordTimings,
)
from engine.request import Request, RequestStatus, Token
from engine.request_trace import RequestTrace, TraceWriter
from engine.scheduler import ChunkingFacts, Scheduler
from engine.warm_up_calibration import WarmUpCalibration, warm_up_request
from engine.word_timing import WordClock
from engine.worker import LaunchedStep
from models.base import ModelInputError, Prompt, SpeechModel
from models.request_options import OptionValue, RequestOptionError, resolve_request_options

log = logging.getLogger("voxgate.engine")


class EngineCore:
    def __init__(
        self,
        model: SpeechModel,
        config: EngineConfig,
        device: torch.device,
        attention: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if model.facts.full_duplex:
            raise ValueError(
                f"{model.facts.name} is a full-duplex model: its loop is engine/duplex.py's "
                "DuplexEngine (engine/factory.py:build_core picks the loop for a model)"
            )
        self.model = model
        self.config = config
        self.clock = clock
        facts = model.facts
        threaded_codec = device.type == "cuda" and config.async_detok
        # The codec's graphs are captured by make_detokenizer, on the thread that replays them,
        # before the KV pool takes its share of the memory left (size_kv_pool): what they and
        # their compiled blocks hold is then not counted as free.
        self.detok: Detokenizer = make_detokenizer(model, config, clock, device, threaded_codec)
        backbone = build_backbone(model, config, device, attention)
        self.blocks, self.worker = backbone.blocks, backbone.worker
        self.on_llm_stream = backbone.on_llm_stream
        num_blocks = backbone.num_blocks
        self.kv_bytes_per_block = backbone.kv_bytes_per_block
        self.device = device
        self.scheduler = Scheduler(
            config,
            self.blocks,
            ChunkingFacts.from_facts(facts),
            threaded_codec=threaded_codec,
            codec_would_emit=self._codec_hook(model),
            first_audio_s=(
                None
                if type(model).first_chunk_audio_s is SpeechModel.first_chunk_audio_s
                else model.first_chunk_audio_s
            ),
        )
        # Jobs out to it and events back, with finished requests' timelines when asked for.
        traces = TraceWriter(config.trace_path) if config.trace_path else None
        self.audio = AudioOut(model, self.scheduler, self.worker, clock, traces)
        self.profile = None
        if config.profile_dir:
            from engine.profile_window import ProfileWindow

            self.profile = ProfileWindow(
                config.profile_dir, config.profile_at_streams, device, config.profile_after_s
            )
        self.async_scheduling = config.async_scheduling and facts.supports_async_scheduling
        if facts.appends_text and not facts.row_width:
            # Streamed text's ids go into a column of each generated row (Worker._feed_text).
            raise ValueError(f"{facts.name}: appends_text needs rows (ModelFacts.row_width)")
        self._in_flight: LaunchedStep | None = None  # launched, tokens not resolved yet
        self.steps = 0
        self.llm_steps = 0  # LLM steps whose tokens were resolved (request traces' step time)
        self._last_llm_start: float | None = None
        # The rows and KV pages read of the last LLM steps launched, newest last, None for a
        # step that ran prompt tokens: the turn a measured interval belongs to (_observe_turn).
        self._recent_rows: deque[tuple[int, int] | None] = deque(maxlen=2)
        self._busy_gap_s: float | None = None  # the last busy interval between step starts
        self.last_timing = StepTiming()
        log.info(
            "engine ready: model=%s attention=%s kv_blocks=%d x %d tokens policy=%s async=%s",
            facts.name,
            attention,
            num_blocks,
            config.block_size,
            config.policy,
            self.async_scheduling,
        )

    def close(self) -> None:
        self.detok.close()
        self.audio.close()

    @property
    def lane_jobs(self) -> int:
        """First-chunk lane jobs done (their time: scheduler.lane_time_s)."""
        return self.audio.lane_jobs

    @on_llm_stream
    def warm_up(self) -> None:
        """Run one short request through every stage before serving: kernels that compile on
        first use (FlashInfer's JIT, cuBLAS heuristics, lazily built graphs) must not land on
        the first real listener's time to first audio. Leaves the engine empty."""
        facts = self.model.facts
        self.model.warm_up_batches(self.config.max_num_seqs)
        self.model.warm_up_audio_input()
        try:
            self.add_request(warm_up_request(facts))
        except EngineOverloaded:  # a pool too small for even this: serve cold rather than fail
            log.warning("KV pool too small to warm the engine up; first requests may be slower")
            self.scheduler.admission.forget_warm_up()
            return
        while self.has_work():
            self.step()
        if self.config.realtime_admission:
            WarmUpCalibration(self).run()
        self.scheduler.admission.forget_warm_up()  # a burst the KV pool could not hold too
        if self.audio.traces is not None:  # what the turn cost model serves from
            capacity = self.scheduler.admission.capacity
            self.audio.traces.write_turn_model(
                capacity.steps.seeds, capacity.pages.prior_s, capacity.steps.slope_bound_by_bursts
            )
        self.steps = 0
        self.restart_turn_timing()  # the first served turn is timed from its own start

    def restart_turn_timing(self) -> None:
        """The next LLM step's turn is timed from its own start: the time since the last step
        (the warm-up's, another burst's) is no turn of what comes next, nor booked to it."""
        self._last_llm_start = None

    # --- requests --------------------------------------------------------------------------------
    @on_llm_stream
    def add_request(self, spec: SpeechRequest) -> Request:
        facts = self.model.facts
        try:
            options = resolve_request_options(facts.request_options, spec.model_options, facts.name)
        except RequestOptionError as exc:
            raise ModelInputError(str(exc)) from None
        if not 0.0 <= spec.audible_after_s <= MAX_AUDIBLE_AFTER_S:
            raise ModelInputError(
                f"audible_after_s must be in [0, {MAX_AUDIBLE_AFTER_S:g}] seconds, "
                f"got {spec.audible_after_s}"
            )
        prompt = self._prompt(spec, options)
        sampling = spec.sampling.within(prompt.length)
        total = len(prompt.token_ids) + sampling.max_tokens
        if total > self.model.facts.max_context:
            raise ModelInputError(
                f"prompt ({len(prompt.token_ids)} tokens) plus max_tokens "
                f"({sampling.max_tokens}) exceeds the model's context of "
                f"{self.model.facts.max_context}; shorten the text or lower max_tokens"
            )
        request = Request(
            prompt.token_ids,
            sampling,
            arrival_time=self.clock(),
            extras=prompt.extras,
            model_options=options,
            # A recurrent model's state cannot be rebuilt from a kept KV prefix: no reuse.
            conversation_id=spec.conversation_id if self.model.recurrent_state is None else None,
            delivery_hold_s=spec.delivery_hold_s,
            playback_rate=spec.playback_rate,
            audible_after_s=spec.audible_after_s,
            realtime=spec.realtime,
            text_feed=prompt.text_feed,
            text_chars=0 if spec.text_stream or spec.turns is not None else len(spec.text),
        )
        if spec.word_timings and self.model.facts.word_timings and prompt.words:
            request.words = WordClock(prompt.words, self.model.facts.seconds_per_token)
        if spec.request_id:
            if spec.request_id in self.scheduler.requests:
                raise ModelInputError(f"request id {spec.request_id!r} is already in use")
            request.request_id = spec.request_id
        judged = time.perf_counter()
        decision = self.scheduler.admit(request)
        self.audio.totals.admission_s += time.perf_counter() - judged
        if not decision.ok:
            if self.audio.traces is not None:
                self.audio.traces.write_refusal(
                    request.arrival_time, decision.cause, decision.reason, decision.outlook
                )
            raise EngineOverloaded(decision.reason)
        self.worker.add_request(request)
        if self.audio.traces is not None:
            request.trace = RequestTrace(request.arrival_time, request.num_prompt_tokens)
        return request

    def _prompt(self, spec: SpeechRequest, options: dict[str, OptionValue]) -> Prompt:
        if spec.text_stream:
            if spec.turns is not None:
                raise ModelInputError("a request of conversation turns takes no streamed text")
            # The model's default refuses, naming the model, when it cannot take more text.
            return self.model.preprocess_text_stream(spec.text, spec.voice, options)
        if spec.turns is None:
            if options:
                return self.model.preprocess_with_options(spec.text, spec.voice, options)
            return self.model.preprocess(spec.text, spec.voice)
        if not self.model.facts.accepts_turns:
            raise ModelInputError(
                f"{self.model.facts.name} is not a turn-based model and takes no conversation "
                "turns; send it text"
            )
        if not spec.turns:
            raise ModelInputError("the conversation is empty: end it with the user's turn")
        return self.model.preprocess_turns(spec.turns)

    def push_audio(self, request_id: str, pcm: np.ndarray) -> None:
        raise ModelInputError(f"{self.model.facts.name} takes no streamed audio input")

    def append_text(self, request_id: str, text: str, final: bool) -> list[EngineEvent]:
        """More of a streamed-text request's text (`final`: the last of it). Text for a request
        that has ended is dropped (it was cancelled or stopped meanwhile). Text the model
        cannot take ends the request `failed`, with the reason: it must not wait for text
        forever."""
        request = self.scheduler.requests.get(request_id)
        if request is None or request.finished:
            return []
        feed = request.text_feed
        if feed is None or feed.final:
            why = "its text is final already" if feed else "it was not opened for streamed text"
            raise ModelInputError(f"request {request_id!r} takes no more text: {why}")
        try:
            feed.extend(self.model.extend_request(request.extras, text, final), final)
            # Ids its prompt waits for go there first (the request is not prefilled before).
            feed.fill_prompt(request.prompt_ids)
        except ModelInputError as exc:
            request.status = RequestStatus.FINISHED_FAILED
            self.scheduler.remove(request_id)
            self.worker.drop_request(request_id)
            failed = self.audio.finished(request, FinishReason.FAILED)
            return [dataclasses.replace(failed, error=str(exc))]
        return []

    def end_session(self, request_id: str) -> list[EngineEvent]:
        """Only full-duplex sessions end this way (engine/duplex.py); nothing to end here."""
        return []

    def end_conversation(self, conversation_id: str) -> None:
        """Free the KV kept for `conversation_id` (its session closed)."""
        self.scheduler.end_conversation(conversation_id)

    def seconds_until_due(self) -> float | None:
        """None: a step is due whenever there is work (only full-duplex loops keep a grid)."""
        return None

    def cancel(self, request_id: str) -> list[EngineEvent]:
        request = self.scheduler.requests.get(request_id)
        if request is None:
            return []
        # Set before the KV is released: a conversation keeps a cancelled request's KV.
        request.status = RequestStatus.FINISHED_CANCELLED
        self.scheduler.remove(request_id)
        self.worker.drop_request(request_id)
        return [self.audio.finished(request, FinishReason.CANCELLED)]

    def report_playback(self, request_id: str, played_s: float) -> None:
        request = self.scheduler.requests.get(request_id)
        if request is not None and played_s >= 0:
            request.played_s = played_s
            request.played_report_time = self.clock()

    def has_work(self) -> bool:
        """Requests that wait for streamed text with nothing to decode are no work: the loop
        sleeps until a command (their text) comes."""
        frame = self.model.facts.frame_tokens
        return (
            any(
                not r.awaits_text or r.pending_detok_tokens >= frame
                for r in self.scheduler.requests.values()
            )
            or self.detok.in_flight > 0
            or self._in_flight is not None
        )

    @property
    def totals(self) -> LoopTotals:
        return self.audio.totals

    def stats(self, stepping: bool = True) -> EngineStats:
        started = time.perf_counter()
        try:
            return self._stats(stepping)
        finally:
            self.audio.totals.stats_s += time.perf_counter() - started

    def _stats(self, stepping: bool) -> EngineStats:
        now = self.clock()
        refusal, admission = self.scheduler.admission.view(now)
        return EngineStats(
            running=self.scheduler.num_running,
            waiting=self.scheduler.num_waiting,
            kv_blocks_total=self.blocks.num_blocks,
            kv_blocks_used=self.blocks.num_used,
            kv_blocks_reserved=self.scheduler.reserved_blocks,
            steps=self.steps,
            last_step=self.last_timing,
            stepping=stepping,
            prefix_reused_tokens=self.scheduler.prefix_reused_tokens,
            kv_blocks_kept=self.blocks.num_kept_blocks,
            # A snapshot (the loop goes on), with this process's full collections.
            totals=with_full_collections(dataclasses.replace(self.audio.totals)),
            # Asked, not counted: the scheduler counts refusals of requests it was given.
            realtime_refusal=refusal,
            admission=admission,
        )

    # --- the step --------------------------------------------------------------------------------
    @on_llm_stream
    def _codec_hook(self, model: SpeechModel) -> Callable[[Request], bool] | None:
        """The scheduler's view of SpeechModel.codec_would_emit for a request (its stream state
        and pending tokens), or None when the model keeps the default (any frame decodes)."""
        if type(model).codec_would_emit is SpeechModel.codec_would_emit:
            return None
        streams = self.worker

        def would_emit(request: Request) -> bool:
            try:
                state = streams.stream_state(request.request_id)
            except KeyError:  # not (or no longer) the worker's: nothing to judge by
                return True
            return model.codec_would_emit(state, request.pending_detok_tokens)

        return would_emit

    def step(self) -> list[EngineEvent]:
        """One turn of the loop: collect finished codec jobs, run an LLM step, hand ready
        chunks to the codec; returns the events for the listeners."""
        if self.profile is not None:
            self.profile.turn(self.scheduler.num_running)
        t0 = self.clock()
        events = self.audio.collect(self.detok.poll())
        plan = self.scheduler.schedule(t0)
        self._count_plan(plan)
        timing = StepTiming(batch_size=len(plan.chunks), num_tokens=plan.num_tokens)
        launched = None
        if plan.chunks:
            t1 = self.clock()
            launched = self.worker.launch(plan.chunks, self.config.block_size, self._in_flight)
            self._mark_launched(plan.chunks, launched)
            self.audio.totals.prefill_graphed += launched.prompts_graphed
            timing.llm_s = self.clock() - t1
        if self.async_scheduling:  # step n+1 is queued: now wait for step n's tokens
            launched, self._in_flight = self._in_flight, launched
        if launched is not None:
            t2 = self.clock()
            tokens = self.worker.resolve(launched)
            timing.llm_s += self.clock() - t2
            self.llm_steps += 1
            events += self._apply_tokens(launched, tokens)
        if plan.chunks:
            interval = self._token_interval(t0, timing.llm_s)
            self.scheduler.observe_llm_turn(interval)
            self._observe_turn(plan)
        # One steady detokenizer job at a time: chunks that became ready meanwhile wait here
        # rather than queue behind it, so the next job takes the most urgent of them (first
        # chunks first) and batches them all; a codec call of flat cost (CosyVoice 2's flow)
        # would otherwise run once per request, and a first chunk wait for every job queued
        # ahead. With a first-chunk lane, first chunks go out at once as a small job of their
        # own beside the steady one (one lane job at a time too).
        if self.detok.in_flight:  # a job may have finished while the LLM stepped
            events += self.audio.collect(self.detok.poll())
        ready = self.audio.submit(self.detok)
        # Inline jobs are done already; a threaded one is waited for only when the LLM had
        # nothing to do, so the loop does not spin.
        events += self.audio.collect(self.detok.poll(wait_s=0.0 if plan.chunks else 0.005))
        timing.detok_s = self.audio.last_job_s
        timing.host_s = max(
            0.0, self.clock() - t0 - timing.llm_s - (timing.detok_s if ready else 0)
        )
        self.steps += 1
        self.last_timing = timing
        totals = self.audio.totals
        turn_s = self.clock() - t0
        totals.loop_turns += 1
        totals.loop_s += turn_s
        totals.llm_s += timing.llm_s
        if plan.num_tokens > len(plan.chunks):
            totals.prefill_turn_s += turn_s
        return events

    def _count_plan(self, plan: SchedulerOutput) -> None:
        """The LLM step's share of the loop's counters (EngineStats.totals)."""
        if not plan.chunks:
            return
        totals = self.audio.totals
        rows = len(plan.chunks)
        totals.llm_steps += 1
        totals.rows += rows
        totals.tokens += plan.num_tokens
        totals.prefill_steps += plan.num_tokens > rows
        totals.capped_steps += (
            rows >= self.config.max_num_seqs and len(self.scheduler.requests) > rows
        )
        totals.lead_held_rows += plan.held_by_lead
        totals.codec_held_rows += plan.held_by_codec

    def _token_interval(self, step_start: float, llm_s: float) -> float:
        """How often a running request gets a token: the time between consecutive LLM steps
        while the loop is busy (the detokenizer's hand-offs, event dispatch and commands
        included), not just the forward pass, which under load is a good deal shorter."""
        last, self._last_llm_start = self._last_llm_start, step_start
        if last is None or step_start - last > 4 * max(llm_s, self.scheduler.step_time_s):
            self._busy_gap_s = None
            return llm_s  # the loop was idle in between: the gap says nothing about the cadence
        self._busy_gap_s = step_start - last
        return self._busy_gap_s

    def _observe_turn(self, plan: SchedulerOutput) -> None:
        """Real-time admission's samples (Scheduler.observe_step): the time since the last
        LLM step's start (_token_interval) is the loop turn that ran the step launched last
        (with async scheduling: the one before it, which that turn waited for), so it is
        booked at that step's rows and the KV pages it read; a turn that ran prompt
        tokens, or followed an idle loop, is no sample."""
        recent, gap = self._recent_rows, self._busy_gap_s
        if gap is None:
            recent.clear()
        back = 2 if self.async_scheduling else 1
        if gap is not None and len(recent) >= back and recent[-back] is not None:
            rows, pages = recent[-back]
            self.scheduler.observe_step(rows, gap, pages)
            traces = self.audio.traces
            if traces is not None and not self.scheduler.admission.calibrating:
                traces.write_turn(self.clock(), rows, pages, gap)
        if plan.num_tokens != len(plan.chunks):
            recent.append(None)
            return
        # The pages the step reads are its rows' only: streams sitting it out (the lead caps)
        # and idle conversations' kept KV hold pages the step does not read. Counted (a pass
        # over the rows) only where admission prices them, or the warm-up measures their price.
        counted = self.scheduler.admission.counts_pages
        recent.append((len(plan.chunks), plan.pages_read if counted else 0))

    def _mark_launched(self, chunks, launched: LaunchedStep) -> None:
        """Bookkeeping known at launch: the KV the step writes, and one more token in flight
        for each request that samples (resolved later by _apply_tokens)."""
        for chunk in chunks:
            chunk.request.num_computed = chunk.start + chunk.num_tokens
        for request in launched.requests:
            request.num_inflight += 1
            request.status = RequestStatus.RUNNING

    def _apply_tokens(self, launched: LaunchedStep, tokens: list[Token]) -> list[EngineEvent]:
        """Resolved tokens join their requests; returns the transcript deltas of turn-based
        models (text tokens run ahead of the audio they go with, as in Realtime APIs) and the
        words finished by requests that time them (engine/word_timing.py)."""
        events: list[EngineEvent] = []
        for request, token in zip(launched.requests, tokens, strict=True):
            request.num_inflight -= 1
            if request.finished:
                # Async only: the step after a stop token (seen one step late) or a cancelled
                # request's step. The token is discarded. Its KV write went to a page inside
                # the request's whole-length reservation (launches never pass max_tokens);
                # pages freed since then are reused only by steps queued after this one on
                # the same stream, so the device runs that write before any reuse.
                continue
            token = self.model.follow_row(request.prompt_ids, request.output_ids, token)
            request.output_ids.append(token)
            if request.words is not None:
                position = self.model.reading_position(token)
                words = request.words.advance(len(request.output_ids) - 1, position)
                if words:
                    events.append(WordTimings(request.request_id, tuple(words)))
            if request.trace is not None:
                now = self.clock()
                request.trace.token(now, self.llm_steps)
                if request.pending_detok_tokens >= self.model.facts.first_chunk_tokens:
                    request.trace.first_chunk_ready(now)
            n = len(request.output_ids)
            if self.model.is_stop(token) and n > request.sampling.min_tokens:
                self.scheduler.finish_generation(request, RequestStatus.FINISHED_STOPPED)
            elif n >= request.sampling.max_tokens:
                self.scheduler.finish_generation(request, RequestStatus.FINISHED_LENGTH)
            if self.model.facts.accepts_turns and self.model.is_text_token(token):
                delta = self._transcript_delta(request)
                if delta:
                    events.append(TextDelta(request.request_id, delta))
        return events

    def _transcript_delta(self, request: Request) -> str:
        """The transcript text added since the last delta. Decoded from all text tokens so far
        (byte-level pieces can split a character); a trailing partial character waits."""
        text = self.model.reply_text(request.output_ids)
        if len(text) <= request.transcript_chars or text.endswith("\ufffd"):
            return ""
        delta, request.transcript_chars = text[request.transcript_chars :], len(text)
        return delta
