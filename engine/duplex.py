"""Full-duplex sessions in the engine: the torch side of frame-synchronous stepping.

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

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.frame_scheduler import FramePlan, FrameScheduler, FrameSessionStats
from engine.outputs import (
    AudioChunk,
    EngineEvent,
    Finished,
    FinishReason,
    ScheduledChunk,
    SpeechRequest,
    TextDelta,
)
from engine.request import Request, RequestStatus
from engine.worker import Worker
from models.base import ModelInputError, SpeechModel

log = logging.getLogger("voxgate.engine")
_RECENT = 1024


class DuplexOverloaded(RuntimeError):
    """No KV room for another session's whole length."""


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
        worker: Worker,
        blocks: BlockManager,
        config: EngineConfig,
        clock: Callable[[], float],
    ) -> None:
        self.model, self.worker, self.blocks = model, worker, blocks
        self.config, self.clock = config, clock
        self.samples_per_frame: int = model.samples_per_frame  # type: ignore[attr-defined]
        self.scheduler = FrameScheduler(
            model.facts.seconds_per_token,
            config.duplex_max_input_frames,
            config.duplex_max_catch_up_frames,
        )
        self.sessions: dict[str, _Live] = {}
        self._reserved = 0
        self._silence = np.zeros(self.samples_per_frame, np.float32)
        self.last_batch = 0
        # Frame accounting of the last sessions that ended (benchmarks and tests read it).
        self.recent_stats: OrderedDict[str, FrameSessionStats] = OrderedDict()

    # --- sessions --------------------------------------------------------------------------------
    def add_session(self, spec: SpeechRequest) -> Request:
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
        decision = self.blocks.can_admit(total, self._reserved)
        if not decision.ok:
            raise DuplexOverloaded(decision.reason)
        request = Request(prompt.token_ids, spec.sampling, arrival_time=self.clock())
        if spec.request_id:
            request.request_id = spec.request_id
        self._reserved += self.blocks.blocks_for(total)
        self.worker.add_request(request)
        self.sessions[request.request_id] = _Live(request, self.model.new_input_state())  # type: ignore[attr-defined]
        self.scheduler.join(request.request_id)
        return request

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

    def end(self, session_id: str, reason: FinishReason = FinishReason.STOP) -> list[EngineEvent]:
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

    def session_stats(self, session_id: str) -> FrameSessionStats | None:
        return self.scheduler.stats(session_id)

    @property
    def reserved_blocks(self) -> int:
        return self._reserved

    def seconds_until_due(self, now: float) -> float:
        """How long the loop may sleep: until the next tick, or a frame when no session is
        ready (new input wakes the loop anyway)."""
        due = self.scheduler.next_due()
        return self.scheduler.frame_s if due is None else max(0.0, due - now)

    # --- the tick ----------------------------------------------------------------------------------
    def step(self, now: float) -> list[EngineEvent]:
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
            self.model.encode_input([x.input_state for x in live], frames)  # type: ignore[attr-defined]
            for x in live:
                out = x.request.output_ids
                out[-1] = self.model.next_input_row(x.input_state, out[-1], len(out) - 1)  # type: ignore[attr-defined]
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
            text = self.model.text_piece(row)  # type: ignore[attr-defined]
            if text:
                events.append(TextDelta(request.request_id, text))
            if len(pcm):
                if request.first_audio_time is None:
                    request.first_audio_time = self.clock()
                request.audio_emitted_s += len(pcm) / rate
                events.append(AudioChunk(request.request_id, pcm, rate))
            if len(request.output_ids) >= request.sampling.max_tokens:
                events += self.end(request.request_id, FinishReason.LENGTH)
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
