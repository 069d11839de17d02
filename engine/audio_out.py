"""The codec's side of the step loop: ready chunks go to the detokenizer as jobs, finished jobs
come back as the listeners' events (audio, then one `Finished` after a request's last chunk).

On the way it keeps what the scheduler learns from the codec (its job times: the steady
estimate for slack, cover and the first-audio budget; the lane's own) and the requests'
timelines when the engine traces them (engine/request_trace.py). The detokenizer itself —
inline, or on worker threads — belongs to the core (`EngineCore.detok`), which hands it in.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from engine.detok_job import Detokenizer, DetokJob
from engine.outputs import (
    AudioChunk,
    EngineEvent,
    Finished,
    FinishReason,
    LoopTotals,
    WordTimings,
)
from engine.request import Request, RequestStatus
from engine.request_trace import TraceWriter
from engine.scheduler import Scheduler
from engine.worker import Worker
from models.base import SpeechModel

REASONS = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_CANCELLED: FinishReason.CANCELLED,
    RequestStatus.FINISHED_FAILED: FinishReason.FAILED,
}


class AudioOut:
    def __init__(
        self,
        model: SpeechModel,
        scheduler: Scheduler,
        worker: Worker,
        clock: Callable[[], float],
        traces: TraceWriter | None = None,
    ) -> None:
        self.model = model
        self.scheduler = scheduler
        self.worker = worker
        self.clock = clock
        self.traces = traces
        self.lane_jobs = 0  # first-chunk lane jobs done (their time: scheduler.lane_time_s)
        self.last_job_s = 0.0  # the last steady job's decode time
        self.totals = LoopTotals()  # the loop's counters; the core adds its own to them

    def submit(self, detok: Detokenizer) -> bool:
        """This step's jobs, if the detokenizer has room: the scheduler picks a lane job and
        a steady one (Scheduler.schedule_detok_jobs). Returns whether any went out."""
        steady_free = not detok.steady_in_flight
        lane_room = detok.lane_room
        if not (steady_free or lane_room):
            return False
        now = self.clock()
        plan = self.scheduler.schedule_detok_jobs(now, steady_free, lane_room, detok.has_lane)
        stops = self.model.facts.stop_token_ids
        for lane, requests in ((True, plan.lane), (False, plan.steady)):
            if not requests:
                continue
            if not lane:
                self.totals.early_rows += sum(map(self._early, requests))
            job = self.worker.detok_job(requests, stops)
            for request, tokens in zip(requests, job.new_tokens, strict=True):
                if request.trace is not None:
                    request.trace.submitted(now, len(tokens), lane, len(requests))
            if lane:
                detok.submit_lane(job)
            else:
                detok.submit(job)
        return bool(plan.lane or plan.steady)

    def _early(self, request: Request) -> bool:
        """Whether the request rides a steady job with less than a chunk, neither its first
        chunk nor its last (LoopTotals.early_rows)."""
        return (
            not request.finished
            and request.num_detokenized > 0
            and request.pending_detok_tokens < self.model.facts.chunk_tokens
        )

    def collect(self, jobs: list[DetokJob]) -> list[EngineEvent]:
        """Finished jobs → audio events, and `Finished` for requests whose last chunk it was."""
        events: list[EngineEvent] = []
        now = self.clock()
        rate = self.model.facts.sample_rate
        for job in jobs:
            self._count(job)
            made_s = sum(len(pcm) for pcm in job.audio or ()) / rate
            self.scheduler.observe_codec_job(job.seconds, made_s, lane=job.lane)
            if job.lane:
                self.lane_jobs += 1
            else:
                self.last_job_s = job.seconds
            if job.error is not None:
                raise RuntimeError(f"detokenizer failed: {job.error}") from job.error
            for request, pcm, final in zip(job.requests, job.audio, job.final, strict=True):
                request.codec_returned()
                if request.request_id not in self.scheduler.requests:
                    continue  # cancelled while its chunk was being decoded
                if request.trace is not None:
                    request.trace.out(now, job.started, len(pcm) / rate, request.audio_lead_s(now))
                if len(pcm):
                    self.scheduler.audio_out(request, now, len(pcm) / rate)
                    self.totals.audio_s += len(pcm) / rate
                    events.append(AudioChunk(request.request_id, pcm, rate, time.monotonic()))
                if final:
                    request.detok_done = True
                    self.scheduler.remove(request.request_id)
                    self.worker.drop_request(request.request_id)
                    events.extend(self._last_words(request))
                    events.append(self.finished(request, REASONS[request.status]))
        return events

    def _count(self, job: DetokJob) -> None:
        t = self.totals
        if job.lane:
            t.lane_jobs += 1
            t.lane_rows += len(job.requests)
            t.lane_s += job.seconds
        else:
            t.codec_jobs += 1
            t.codec_rows += len(job.requests)
            t.codec_s += job.seconds

    def _last_words(self, request: Request) -> list[EngineEvent]:
        """The word still being spoken when a request's audio ended (its end is the audio's)."""
        if request.words is None:
            return []
        out = request.output_ids
        audio_tokens = len(out) - (1 if out and self.model.is_stop(out[-1]) else 0)
        words = request.words.finish(audio_tokens)
        return [WordTimings(request.request_id, tuple(words))] if words else []

    def finished(self, request: Request, reason: FinishReason) -> Finished:
        """The request's `Finished` event; its timeline goes to the trace file now."""
        if self.traces is not None and request.trace is not None:
            request.trace.tokens = len(request.output_ids)
            request.trace.status = request.status.name.lower()
            self.traces.write(request.request_id, request.trace)
        return Finished(
            request.request_id,
            reason,
            len(request.output_ids),
            output_ids=tuple(request.output_ids),
            reused_tokens=request.num_reused,
        )

    def close(self) -> None:
        if self.traces is not None:
            self.traces.close()
