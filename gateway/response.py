"""One response: its streamed text, the engine requests it fans out to, and its paced audio.

A `Response` collects text as it arrives and cuts it into sentence segments. When its turn
comes, a `ResponseRunner` plays it:

    submitter ── one engine request per segment, at most `segment_pipeline_depth` generating
       │          at once, submitted the moment a segment is complete (audio starts before
       │          the text is final)
       ▼
    collectors ── drain each request's event stream into its segment, so a segment's generation
       │          is seen to end while an earlier segment is still playing
       ▼
    player ────── segments strictly in order → one encoder → PlaybackClock → send queue

so the segments sound back-to-back inside one `response.started` … `response.done`.
Cancelling the runner's task (barge-in, disconnect) cancels every engine request it started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.api import (
    AudioChunk,
    EngineClient,
    EngineEvent,
    EngineOverloaded,
    Finished,
    FinishReason,
    ModelInputError,
    ResponseStream,
    SamplingParams,
    SpeechRequest,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.config import GatewaySettings
from gateway.encode_workers import EncoderProcessFailed
from gateway.metrics import GatewayMetrics
from gateway.pacing import PlaybackClock
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
    ServerEvent,
)
from gateway.segmenter import SentenceSegmenter

_STATUS = {
    FinishReason.STOP: ResponseStatus.COMPLETED,
    FinishReason.LENGTH: ResponseStatus.LENGTH,
    FinishReason.CANCELLED: ResponseStatus.CANCELLED,
    FinishReason.FAILED: ResponseStatus.FAILED,
}


def share_tokens(sampling: SamplingParams, share: float) -> SamplingParams:
    """The part of a response's token budget that one of its sentence segments gets."""
    max_tokens = max(1, round(sampling.max_tokens * share))
    min_tokens = min(round(sampling.min_tokens * share), max_tokens)
    return dataclasses.replace(sampling, max_tokens=max_tokens, min_tokens=min_tokens)


def length_shares(segments: list[str]) -> list[float]:
    """Each segment's share of a whole text's token budget: its share of the characters."""
    total = sum(len(s) for s in segments)
    return [len(s) / total for s in segments]


class EngineUnavailable(Exception):
    """The engine loop is gone: no session can be served, so the session closes with 1011
    (after the failed response has had its `response.done`)."""


class Response:
    """The text side of a response, from its first `text` event to `final`."""

    def __init__(self, response_id: str, segmenter: SentenceSegmenter) -> None:
        self.response_id = response_id
        self.text_chars = 0
        self.input_closed = False
        self._segmenter = segmenter
        self._segments: asyncio.Queue[str | None] = asyncio.Queue()  # None: input closed
        self.token_shares: list[float] | None = None  # per segment, when known up front

    def add_text(self, text: str, final: bool) -> None:
        single_shot = final and self.text_chars == 0
        self.text_chars += len(text)
        segments = self._segmenter.push(text)
        if final:
            segments += self._segmenter.finish()
        if single_shot and len(segments) > 1:
            # The whole text came at once, so the token budget can be shared out: a response's
            # min/max_tokens then mean the same whether or not the text split into sentences.
            self.token_shares = length_shares(segments)
        for segment in segments:
            self._segments.put_nowait(segment)
        if final:
            self.input_closed = True
            self._segments.put_nowait(None)

    def close_input(self) -> None:
        """No more text: the response was cancelled or failed before its `final`."""
        if not self.input_closed:
            self.input_closed = True
            self._segments.put_nowait(None)

    async def next_segment(self) -> str | None:
        return await self._segments.get()


@dataclass(eq=False)
class Segment:
    """One engine request of a response."""

    request_id: str
    events: asyncio.Queue[EngineEvent] = field(default_factory=asyncio.Queue)
    finished: Finished | None = None  # set when the engine has finished generating it
    start_s: float | None = None  # its offset in the response's audio, once it plays
    error_sent: bool = False  # the submitter already told the client why it failed
    submit: asyncio.Task | None = None  # the engine.submit call, while it is in flight


@dataclass(frozen=True)
class Emitter:
    """Where a runner puts its output: the session's send queue (may raise SendQueueFull)."""

    event: Callable[[ServerEvent], None]
    audio: Callable[[bytes, int], None]  # (wire frame, its duration in ms)


@dataclass(frozen=True)
class SpeechOptions:
    """What `session.start` chose, for every response of the session."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    voice: str | None = None
    output: AudioSpec = field(default_factory=AudioSpec)


class _Outcome(enum.Enum):
    NEXT = enum.auto()
    STOP = enum.auto()


class ResponseRunner:
    def __init__(
        self,
        response: Response,
        engine: EngineClient,
        settings: GatewaySettings,
        options: SpeechOptions,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        log: logging.LoggerAdapter,
    ) -> None:
        self.response = response
        self._engine = engine
        self._settings = settings
        self._options = options
        self._emit = emit
        self._metrics = metrics
        self._open_encoder = open_encoder
        self._log = log
        self.segments: list[Segment] = []
        self.cancel_requested = False
        self._ordered: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._clock = PlaybackClock(settings.lead_ms / 1000)
        self._status = ResponseStatus.COMPLETED
        self._audio_ms = 0
        self._model_audio_s = 0.0
        self._first_submit: float | None = None
        self._ttfa_ms: int | None = None

    # --- control, from the session ---------------------------------------------------------
    def report_playback(self, played_ms: float) -> None:
        """Hand the client's position to the engine request of the segment being heard."""
        played_s = played_ms / 1000
        for segment in reversed(self.segments):
            if segment.start_s is not None and played_s >= segment.start_s:
                if segment.finished is None:
                    self._engine.report_playback(segment.request_id, played_s - segment.start_s)
                return

    def cancel_engine_requests(self) -> None:
        """Free every request still generating; safe to call more than once."""
        for segment in self.segments:
            if segment.finished is not None:
                continue
            segment.finished = Finished(segment.request_id, FinishReason.CANCELLED, 0)
            if segment.submit is not None and not segment.submit.done():
                # Not admitted yet: cancel once it is (a cancel sent now could overtake it).
                segment.submit.add_done_callback(self._cancel_when_admitted(segment.request_id))
            else:
                self._engine.cancel(segment.request_id)

    def _cancel_when_admitted(self, request_id: str) -> Callable[[asyncio.Task], None]:
        def callback(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is None:
                self._engine.cancel(request_id)

        return callback

    # --- the run ---------------------------------------------------------------------------
    async def run(self) -> ResponseStatus:
        """Play the response to its end. A cancel with `cancel_requested` set is a barge-in and
        ends with `response.done` cancelled; any other cancel is the session going away and
        propagates without a word to the client."""
        self._emit.event(ResponseStarted(self.response.response_id))
        encoder: ChunkEncoder | None = None
        try:
            encoder = self._open_encoder(self._options.output, self._engine.facts.sample_rate)
            self._spawn(self._submit_all())
            while (segment := await self._ordered.get()) is not None:
                if await self._play_segment(segment, encoder) is _Outcome.STOP:
                    break
            await self._send_frames(await encoder.flush())
        except EncoderProcessFailed as exc:  # --encode-processes: its worker is gone
            self._log.error("response %s: %s", self.response.response_id, exc)
            self._emit.event(ErrorEvent(ErrorCode.INTERNAL, str(exc)))
            self._status = ResponseStatus.FAILED
        except asyncio.CancelledError:
            if not self.cancel_requested:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._status = ResponseStatus.CANCELLED
        finally:
            if encoder is not None:
                encoder.close()
            self.response.close_input()  # later text opens a new response, never this one
            self.cancel_engine_requests()
            for task in self._tasks:
                task.cancel()
        self._finish()
        return self._status

    def _finish(self) -> None:
        self._metrics.responses.labels(self._status.value).inc()
        self._emit.event(
            ResponseDone(self.response.response_id, self._status, self._audio_ms, self._ttfa_ms)
        )
        self._log.info(
            "response done id=%s status=%s audio_ms=%d ttfa_ms=%s segments=%d underruns=%d",
            self.response.response_id,
            self._status.value,
            self._audio_ms,
            self._ttfa_ms,
            len(self.segments),
            self._clock.underruns,
        )

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- submitter and collectors ----------------------------------------------------------
    async def _submit_all(self) -> None:
        slots = asyncio.Semaphore(self._settings.segment_pipeline_depth)
        while (text := await self.response.next_segment()) is not None:
            await slots.acquire()
            segment = Segment(f"{self.response.response_id}-s{len(self.segments)}")
            self.segments.append(segment)
            if self._first_submit is None:
                self._first_submit = time.monotonic()
            opts = self._options
            sampling = opts.sampling
            shares = self.response.token_shares
            if shares is not None:
                sampling = share_tokens(sampling, shares[len(self.segments) - 1])
            request = SpeechRequest(
                text,
                opts.voice,
                sampling,
                segment.request_id,
                delivery_hold_s=opts.output.frame_ms / 1000,
            )
            # Shielded: cancelling this task (barge-in, disconnect) must not abandon a submit
            # the engine thread is about to answer; cancel_engine_requests waits for it instead.
            segment.submit = asyncio.ensure_future(self._engine.submit(request))
            try:
                stream = await asyncio.shield(segment.submit)
            except Exception as exc:
                slots.release()
                self._submit_failed(segment, exc)
                break
            self._log.debug("segment %s submitted chars=%d", segment.request_id, len(text))
            self._spawn(self._collect(segment, stream, slots))
            self._ordered.put_nowait(segment)
        self._ordered.put_nowait(None)

    def _submit_failed(self, segment: Segment, exc: Exception) -> None:
        if isinstance(exc, EngineOverloaded):
            code = ErrorCode.OVERLOADED
        elif isinstance(exc, ModelInputError | ValueError):
            code = ErrorCode.BAD_FIELD
        elif not self._engine.ready:
            code = ErrorCode.INTERNAL
        else:
            self._log.exception("engine submit failed")
            code = ErrorCode.INTERNAL
        message = str(exc) or type(exc).__name__
        segment.finished = Finished(segment.request_id, FinishReason.FAILED, 0, message)
        segment.events.put_nowait(segment.finished)
        segment.error_sent = True
        self._emit.event(ErrorEvent(code, message))
        self._ordered.put_nowait(segment)

    @staticmethod
    async def _collect(segment: Segment, stream: ResponseStream, slots: asyncio.Semaphore) -> None:
        try:
            async for event in stream:
                if isinstance(event, Finished):
                    segment.finished = event
                segment.events.put_nowait(event)
        finally:
            slots.release()

    # --- player ----------------------------------------------------------------------------
    async def _play_segment(self, segment: Segment, encoder) -> _Outcome:
        segment.start_s = self._model_audio_s
        while True:
            event = await segment.events.get()
            if isinstance(event, AudioChunk):
                self._model_audio_s += event.duration_s
                async for frames in encoder.encode_parts(event.pcm):
                    await self._send_frames(frames)
                continue
            return self._segment_finished(segment, event)

    def _segment_finished(self, segment: Segment, event: Finished) -> _Outcome:
        status = _STATUS[event.reason]
        if status is ResponseStatus.LENGTH:
            self._status = status  # one truncated segment makes the response `length`
            return _Outcome.NEXT
        if status is ResponseStatus.COMPLETED:
            return _Outcome.NEXT
        self._status = status
        if status is ResponseStatus.FAILED and not segment.error_sent:
            self._emit.event(ErrorEvent(ErrorCode.MODEL_ERROR, event.error or "generation failed"))
        return _Outcome.STOP

    async def _send_frames(self, frames: list[bytes]) -> None:
        frame_ms = self._options.output.frame_ms
        for frame in frames:
            await self._clock.wait()
            if self._clock.mark_sent(frame_ms / 1000):
                self._metrics.underruns.inc()
            self._emit.audio(frame, frame_ms)
            self._audio_ms += frame_ms
            self._metrics.audio_sent.inc(frame_ms / 1000)
            if self._ttfa_ms is None:
                start = self._first_submit if self._first_submit is not None else time.monotonic()
                ttfa_s = time.monotonic() - start
                self._ttfa_ms = round(ttfa_s * 1000)
                self._metrics.ttfa.observe(ttfa_s)


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel a task and wait for it to unwind (its `finally` frees engine requests)."""
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # we are being cancelled ourselves: do not swallow that
