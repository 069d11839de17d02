"""The engine loop of full-duplex models (Moshi): every session stepped together, once per
frame. It serves the same loop interface as engine/core.py's EngineCore (engine/loop.py), so
the clients drive either the same way; `seconds_until_due` tells them when the next frame's
tick is.

Each tick (`engine/frame_scheduler.py` decides when, and what each session's input is), for
every session in the tick at once: the user's newest audio frame (or silence) is encoded, each
session's last sampled row is completed with it (`model.next_input_row`), one forward runs over
the batch on the paged KV cache (one token per session, through the same `Worker.run_llm` as
TTS decodes), the text column is sampled by the engine's sampler and the audio codebooks by the
model's depth stage, and the codec decodes one frame per session. Audio, text and the end of a
session go out as `AudioChunk`, `TextDelta` and `Finished` events.

The codec runs inline, after the forward: a frame's audio is due one period after its tick,
so there is no later step to overlap it with.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from engine.api import EngineOverloaded
from engine.backbone import build_backbone, on_llm_stream
from engine.config import EngineConfig
from engine.frame_scheduler import FramePlan, FrameScheduler, FrameSessionStats
from engine.gc_pauses import with_full_collections
from engine.outputs import (
    AdmissionStats,
    AudioChunk,
    EngineEvent,
    EngineStats,
    Finished,
    FinishReason,
    LoopTotals,
    ScheduledChunk,
    SpeechRequest,
    StepTiming,
    TextDelta,
)
from engine.refusal_causes import RefusalCause
from engine.request import Request, RequestStatus, SamplingParams
from models.base import DuplexModel, ModelInputError, SpeechModel

log = logging.getLogger("voxgate.engine")
_RECENT = 1024


@dataclass(eq=False)
class _Live:
    request: Request
    input_state: object  # the model's per-session encoder state
    pcm: list[np.ndarray] = field(default_factory=list)  # queued input audio, in order
    buffered: int = 0  # samples in `pcm`
    ending: bool = False


class DuplexEngine:
    def __init__(
        self,
        model: SpeechModel,
        config: EngineConfig,
        device: torch.device,
        attention: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not model.facts.full_duplex:
            raise ValueError(
                f"{model.facts.name} is not a full-duplex model: its loop is engine/core.py's "
                "EngineCore (engine/factory.py:build_core picks the loop for a model)"
            )
        self.model, self.config, self.clock = model, config, clock
        backbone = build_backbone(model, config, device, attention)
        self.blocks, self.worker = backbone.blocks, backbone.worker
        self.on_llm_stream = backbone.on_llm_stream
        if device.type == "cuda" and config.cuda_graphs:
            from engine.cuda_graphs import CallableGraphs

            model.enable_cuda_graphs(CallableGraphs(device))  # its codec runs on this thread
        # A full-duplex model offers DuplexModel's methods besides SpeechModel's.
        self.duplex = cast(DuplexModel, model)
        self.samples_per_frame: int = self.duplex.samples_per_frame
        self.scheduler = FrameScheduler(
            model.facts.seconds_per_token,
            config.duplex_max_input_frames,
            config.duplex_max_catch_up_frames,
        )
        self.sessions: dict[str, _Live] = {}
        self._reserved = 0
        self.refusals: dict[str, int] = {}  # sessions refused at submit, by cause
        self._silence = np.zeros(self.samples_per_frame, np.float32)
        self.last_batch = 0
        self.loop_totals = LoopTotals()
        self.steps = 0
        self.last_timing = StepTiming()
        # Frame accounting of the last sessions that ended (benchmarks and tests read it).
        self.recent_stats: OrderedDict[str, FrameSessionStats] = OrderedDict()
        log.info(
            "engine ready: model=%s (full duplex) attention=%s kv_blocks=%d x %d tokens",
            model.facts.name,
            attention,
            backbone.num_blocks,
            config.block_size,
        )

    def close(self) -> None:
        """Nothing to stop: the codec runs inline, on the loop's thread."""

    @on_llm_stream
    def warm_up(self) -> None:
        """A session primed and stepped on three frames of silence, ticks forced by a clock
        far ahead (the grid restarts with the first real session), so that kernels compiled on
        first use do not land on the first real session. Leaves the engine empty."""
        self.model.warm_up_batches(self.config.max_num_seqs)
        params = SamplingParams(max_tokens=4, min_tokens=0, seed=0)
        try:
            request = self.add_request(SpeechRequest("", None, params))
        except EngineOverloaded:  # a pool too small: serve cold rather than fail
            log.warning("KV pool too small to warm the engine up; first sessions may be slower")
            self.refusals.clear()  # the warm-up's refusal refused no client
            return
        self.push_audio(request.request_id, np.zeros(3 * self.samples_per_frame, np.float32))
        far = self.clock() + 1e6
        for tick in range(4):
            self._tick(far + tick * self.model.facts.seconds_per_token)
        self.end_session(request.request_id)
        self.steps = 0

    # --- sessions --------------------------------------------------------------------------------
    @on_llm_stream
    def add_request(self, spec: SpeechRequest) -> Request:
        """A new session. Raises ModelInputError (too long) or EngineOverloaded (no KV room
        for its whole length)."""
        if spec.model_options:  # full-duplex models take no per-request options
            raise ModelInputError(
                f"{self.model.facts.name} takes no model_options "
                f"(got {', '.join(map(str, spec.model_options))})"
            )
        prompt = self.model.preprocess(spec.text, spec.voice)
        frames = spec.sampling.max_tokens
        total = len(prompt.token_ids) + frames
        if total > self.model.facts.max_context:
            raise ModelInputError(
                f"a session of {frames} frames exceeds the model's context of "
                f"{self.model.facts.max_context} positions; lower max_tokens"
            )
        if spec.request_id and spec.request_id in self.sessions:
            raise ModelInputError(f"request id {spec.request_id!r} is already in use")
        if len(self.sessions) >= self.config.max_num_seqs:
            # Every session steps in every frame: one more than the step is sized for (its
            # graphs, its attention's page table) cannot wait its turn as a TTS request can.
            self._refused(RefusalCause.MAX_NUM_SEQS)
            raise EngineOverloaded(
                f"the engine steps at most {self.config.max_num_seqs} sessions together "
                "(--max-num-seqs); try again later"
            )
        decision = self.blocks.can_admit(total, self._reserved)
        if not decision.ok:
            self._refused(RefusalCause.KV)
            raise EngineOverloaded(decision.reason)
        request = Request(prompt.token_ids, spec.sampling, arrival_time=self.clock())
        if spec.request_id:
            request.request_id = spec.request_id
        self._reserved += self.blocks.blocks_for(total)
        self.worker.add_request(request)
        self.sessions[request.request_id] = _Live(request, self.duplex.new_input_state())
        self.scheduler.join(request.request_id)
        return request

    @on_llm_stream
    def push_audio(self, session_id: str, pcm: np.ndarray) -> None:
        """The user's audio (float32 mono at the model's rate), any length; whole frames are
        queued for the scheduler, the remainder waits for the next push."""
        live = self.sessions.get(session_id)
        if live is None or live.ending or len(pcm) == 0:
            return
        live.pcm.append(np.asarray(pcm, np.float32))
        before = live.buffered // self.samples_per_frame
        live.buffered += len(pcm)
        self.scheduler.push_frames(session_id, live.buffered // self.samples_per_frame - before)

    def end_session(self, session_id: str) -> list[EngineEvent]:
        """The user hung up: the session ends between frames (status stop)."""
        return self._end(session_id, FinishReason.STOP)

    def append_text(self, request_id: str, text: str, final: bool) -> list[EngineEvent]:
        raise ModelInputError(f"{self.model.facts.name} takes no streamed text")

    def cancel(self, session_id: str) -> list[EngineEvent]:
        return self._end(session_id, FinishReason.CANCELLED)

    def report_playback(self, request_id: str, played_s: float) -> None:
        """Frames go out on the grid, whatever the listener has played: nothing to do."""

    def end_conversation(self, conversation_id: str) -> None:
        """A session keeps no KV past its end: nothing to free."""

    def _end(self, session_id: str, reason: FinishReason) -> list[EngineEvent]:
        """The session leaves between frames: its KV pages go back at once."""
        live = self.sessions.pop(session_id, None)
        if live is None:
            return []
        stats = self.scheduler.leave(session_id)
        if stats is not None:
            self.recent_stats[session_id] = stats
            while len(self.recent_stats) > _RECENT:
                self.recent_stats.popitem(last=False)
        self.worker.drop_request(session_id)
        request = live.request
        self.blocks.free(session_id)
        self._reserved -= self.blocks.blocks_for(
            request.num_prompt_tokens + request.sampling.max_tokens
        )
        status = {
            FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
            FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
            FinishReason.CANCELLED: RequestStatus.FINISHED_CANCELLED,
        }.get(reason, RequestStatus.FINISHED_FAILED)
        request.status = status
        return [Finished(session_id, reason, len(request.output_ids))]

    def _refused(self, cause: RefusalCause) -> None:
        self.refusals[cause] = self.refusals.get(cause, 0) + 1

    def session_stats(self, session_id: str) -> FrameSessionStats | None:
        return self.scheduler.stats(session_id)

    @property
    def reserved_blocks(self) -> int:
        return self._reserved

    def has_work(self) -> bool:
        return bool(self.sessions)

    def seconds_until_due(self) -> float:
        """How long the loop may sleep: until the next tick, or a frame when no session is
        ready (new input wakes the loop anyway)."""
        due = self.scheduler.next_due()
        return self.scheduler.frame_s if due is None else max(0.0, due - self.clock())

    def stats(self, stepping: bool = True) -> EngineStats:
        return EngineStats(
            running=len(self.sessions),
            waiting=0,
            kv_blocks_total=self.blocks.num_blocks,
            kv_blocks_used=self.blocks.num_used,
            kv_blocks_reserved=self._reserved,
            steps=self.steps,
            last_step=self.last_timing,
            stepping=stepping,
            totals=self._totals_now(),
            admission=AdmissionStats(streams=len(self.sessions), refusals=dict(self.refusals)),
            realtime_refusal=(
                RefusalCause.MAX_NUM_SEQS if len(self.sessions) >= self.config.max_num_seqs else ""
            ),
            kv_blocks_per_session=self.blocks.blocks_for(self.model.facts.max_context),
        )

    @property
    def totals(self) -> LoopTotals:
        return self.loop_totals

    def _totals_now(self) -> LoopTotals:
        """A snapshot of the loop's counters (the loop goes on), with the frame accounting
        and this process's full collections."""
        frames = self.scheduler.totals
        return with_full_collections(
            dataclasses.replace(
                self.loop_totals,
                frames_out=frames.frames_out,
                frames_late=frames.late,
                input_late=frames.input_late,
                input_dropped=frames.input_dropped,
                resyncs=self.scheduler.resyncs,
            )
        )

    # --- the tick ----------------------------------------------------------------------------------
    @on_llm_stream
    def step(self) -> list[EngineEvent]:
        """Run the frame that is due, if one is: every session in it at once."""
        t0 = self.clock()
        events = self._tick(t0)
        took = self.clock() - t0
        loop = self.loop_totals
        loop.loop_turns += 1
        loop.loop_s += took
        if self.last_batch:
            # A frame's step is the LLM, its depth stage and the codec together: all of it
            # counts as the LLM's in the loop counters (EngineStats.totals).
            loop.llm_steps += 1
            loop.llm_s += took
            loop.rows += self.last_batch
            loop.tokens += self.last_batch
            self.last_timing = StepTiming(
                llm_s=took, batch_size=self.last_batch, num_tokens=self.last_batch
            )
            self.last_batch = 0
            self.steps += 1
        loop.audio_s += sum(e.duration_s for e in events if isinstance(e, AudioChunk))
        return events

    def _tick(self, now: float) -> list[EngineEvent]:
        plan = self.scheduler.plan(now)
        if plan is None:
            return []
        events = self._run(plan)
        self.scheduler.finish(plan, self.clock())
        return events

    def _run(self, plan: FramePlan) -> list[EngineEvent]:
        live = [self.sessions[s.session_id] for s in plan.live]
        if live:
            frames = [
                self._take_frame(x, s.use_input, s.drop_before)
                for x, s in zip(live, plan.live, strict=True)
            ]
            self.duplex.encode_input([x.input_state for x in live], frames)
            for x in live:
                out = x.request.output_ids
                out[-1] = self.duplex.next_input_row(x.input_state, out[-1], len(out) - 1)
        stepping = [self.sessions[i].request for i in plan.priming] + [x.request for x in live]
        chunks = [ScheduledChunk(r, r.num_computed, 1) for r in stepping]
        for chunk in chunks:
            if not self.blocks.ensure(chunk.request.request_id, chunk.start + 1):
                raise RuntimeError("KV reservation violated: block pool ran out mid-session")
            chunk.request.block_table = self.blocks.table(chunk.request.request_id)
        self.last_batch = len(chunks)
        rows = self.worker.run_llm(chunks, self.config.block_size)
        for request, row in zip(stepping, rows, strict=True):
            request.num_computed += 1
            request.output_ids.append(row)
            request.status = RequestStatus.RUNNING
        states = [self.worker.stream_state(r.request_id) for r in stepping]
        audio = self.model.detokenize(states, [[row] for row in rows], [False] * len(rows))
        rate = self.model.facts.sample_rate
        events: list[EngineEvent] = []
        for request, row, pcm in zip(stepping, rows, audio, strict=True):
            text = self.duplex.text_piece(row)
            if text:
                events.append(TextDelta(request.request_id, text))
            if len(pcm):
                if request.first_audio_time is None:
                    request.first_audio_time = self.clock()
                request.audio_emitted_s += len(pcm) / rate
                events.append(AudioChunk(request.request_id, pcm, rate, time.monotonic()))
            if len(request.output_ids) >= request.sampling.max_tokens:
                events += self._end(request.request_id, FinishReason.LENGTH)
        return events

    def _take_frame(self, live: _Live, use_input: bool, drop: int) -> np.ndarray:
        if drop:
            self._consume(live, drop * self.samples_per_frame)
        if not use_input:
            return self._silence
        return self._consume(live, self.samples_per_frame)

    def _consume(self, live: _Live, n: int) -> np.ndarray:
        joined = np.concatenate(live.pcm) if len(live.pcm) > 1 else live.pcm[0]
        taken, rest = joined[:n], joined[n:]
        live.pcm = [rest] if len(rest) else []
        live.buffered -= n
        return taken
