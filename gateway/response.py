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

so the segments sound back-to-back inside one `response.started` … `response.done`. What every
reply shares (those two events, the status, encoder, pacing, engine-request cancelling,
metrics) is the runner's `ReplyLifecycle` (gateway/reply.py). Cancelling the runner's task
(barge-in, disconnect) cancels every engine request it started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.api import (
    AudioChunk,
    EngineClient,
    EngineEvent,
    Finished,
    FinishReason,
    ResponseStream,
    SamplingParams,
    SpeechRequest,
    WordTimings,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.protocol import ResponseStatus, SpokenWord
from gateway.reply import Emitter, ReplyLifecycle, ReplyState, SpeechOptions
from gateway.segmenter import SentenceSegmenter
from gateway.spoken_words import SpokenWords

if TYPE_CHECKING:
    from gateway.response_overrides import ResponseOverrides


def share_tokens(sampling: SamplingParams, share: float) -> SamplingParams:
    """The part of a response's token budget that one of its sentence segments gets."""
    max_tokens = max(1, round(sampling.max_tokens * share))
    min_tokens = min(round(sampling.min_tokens * share), max_tokens)
    return dataclasses.replace(sampling, max_tokens=max_tokens, min_tokens=min_tokens)


def length_shares(segments: list[str]) -> list[float]:
    """Each segment's share of a whole text's token budget: its share of the characters."""
    total = sum(len(s) for s in segments)
    return [len(s) / total for s in segments]


# Streamed text opens its engine request at its first whole word: a non-space, then a space
# (the model tokenises streamed text up to such a space: models/qwen3_tts/streamed_text.py).
_WHOLE_WORD = re.compile(r"\S ")


class Response:
    """The text side of a response, from its first `text` event to `final`.

    For a model that takes text into a running request (`appends_text`), text that streams
    (its first `text` not final) is not cut into sentences: the response is one engine
    request, opened with the first whole word, and every later piece is appended to it
    (`next_piece`), so speech starts after a word and its prosody runs on across sentences."""

    def __init__(
        self, response_id: str, segmenter: SentenceSegmenter, appends_text: bool = False
    ) -> None:
        self.response_id = response_id
        self.text_chars = 0
        self.input_closed = False
        self._segmenter = segmenter
        self._appends_text = appends_text
        self.streamed = False  # decided by the first `text`: streams into one engine request
        self._segments: asyncio.Queue[str | None] = asyncio.Queue()  # None: input closed
        self._pieces: asyncio.Queue[tuple[str, bool] | None] = asyncio.Queue()  # streamed
        self.token_shares: list[float] | None = None  # per segment, when known up front
        # Its own options over the session's (its first `text` or response.create set them).
        self.overrides: ResponseOverrides | None = None

    def add_text(self, text: str, final: bool) -> None:
        single_shot = final and self.text_chars == 0
        if self.text_chars == 0:
            self.streamed = self._appends_text and not final
        self.text_chars += len(text)
        if self.streamed:
            self._pieces.put_nowait((text, final))
            self.input_closed = final
            return
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
            self._pieces.put_nowait(None)

    async def next_segment(self) -> str | None:
        return await self._segments.get()

    async def next_piece(self) -> tuple[str, bool] | None:
        """Streamed text: the next (text, final); None: the input closed without `final`."""
        return await self._pieces.get()

    async def opening_text(self) -> tuple[str, bool] | None:
        """Streamed text: the text up to its first whole word (or all of it, when `final`
        comes first), and whether it is final; None: closed without `final`."""
        text = ""
        while (piece := await self.next_piece()) is not None:
            text += piece[0]
            if piece[1] or _WHOLE_WORD.search(text.lstrip()):
                return text, piece[1]
        return None


def segment_request_id(response_id: str, index: int) -> str:
    """The engine request of a response's `index`-th sentence segment: its request trace's
    name too (voxbench/late_chunks.py finds a response's first by it)."""
    return f"{response_id}-s{index}"


@dataclass(eq=False)
class Segment:
    """One engine request of a response."""

    request_id: str
    events: asyncio.Queue[EngineEvent] = field(default_factory=asyncio.Queue)
    start_s: float | None = None  # its offset in the response's audio, once it plays


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
        *,
        paced: bool = True,  # False: audio goes out as it is made (HTTP, where TCP paces it)
    ) -> None:
        self.response = response
        self._settings = settings
        self._options = options
        self._log = log
        self.reply = ReplyLifecycle(
            response.response_id,
            engine,
            options.output,
            emit,
            metrics,
            open_encoder,
            log,
            kind="response",
            lead_s=settings.lead_ms / 1000 if paced else None,
            speed=options.speed,
            echo=response.overrides.echo if response.overrides is not None else None,
            options=options,
        )
        self.segments: list[Segment] = []
        self._ordered: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._model_audio_s = 0.0  # model time (the segments' offsets too), not played time
        self._words = SpokenWords(response.response_id, emit.event, self.reply.time)
        self._played_ms: float | None = None  # the client's last playback report

    @property
    def started(self) -> bool:
        """`run` has begun: its `response.started` is out."""
        return self.reply.state is not ReplyState.CREATED

    # --- control, from the session ---------------------------------------------------------
    def report_playback(self, played_ms: float) -> None:
        """Hand the client's position to the engine request of the segment being heard."""
        self._played_ms = played_ms
        played_s = self.reply.time.model_s(played_ms / 1000)
        for segment in reversed(self.segments):
            if segment.start_s is not None and played_s >= segment.start_s:
                self.reply.report_playback(segment.request_id, played_s - segment.start_s)
                return

    def cancel(self) -> None:
        """Barge-in: the response ends `cancelled`. Once `run` has started, the caller then
        cancels the runner's task, which `run` answers with `response.done` (any other cancel
        of the task is the session going away and propagates without a word to the client);
        a `run` not started yet ends at once (`end_unplayed`)."""
        self.reply.cancel()
        self.response.close_input()  # text that follows the cancel starts a new response

    # --- the run ---------------------------------------------------------------------------
    async def run(self) -> ResponseStatus:
        """Play the response to its end, or to its barge-in (`cancel`)."""
        if self.reply.cancelled:  # cancelled before its turn came: nothing to play
            return self.end_unplayed()
        self.reply.start()
        try:
            await self.reply.play(self._play)
        except asyncio.CancelledError:
            if not self.reply.cancelled:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            self.response.close_input()  # later text opens a new response, never this one
            for task in self._tasks:
                task.cancel()
        return self.reply.done(f"segments={len(self.segments)}", self._heard_words())

    def end_unplayed(self) -> ResponseStatus:
        """A response cancelled before it played: `response.started`, then at once
        `response.done` `cancelled` (the client opened it, so it is told how it ended)."""
        self.cancel()
        self.reply.start()
        return self.reply.done("cancelled before it played", self._heard_words())

    def _heard_words(self) -> tuple[SpokenWord, ...] | None:
        """For a response cut short in a session with word timings: the words heard to
        their end (docs/protocol.md, `response.done` `heard_words`); None otherwise."""
        if not (self._options.word_timings and self.reply.cancelled and self.reply.paced):
            return None
        reported = self._played_ms / 1000 if self._played_ms is not None else None
        return self._words.heard(self.reply.heard_s(reported) * 1000)

    async def _play(self, encoder: ChunkEncoder) -> None:
        self._spawn(self._submit_all())
        while (segment := await self._ordered.get()) is not None:
            if await self._play_segment(segment, encoder) is _Outcome.STOP:
                break
        await self.reply.send(await encoder.flush())

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- submitter and collectors ----------------------------------------------------------
    async def _submit_all(self) -> None:
        if self.response.streamed:
            await self._submit_streamed()
            return
        slots = asyncio.Semaphore(self._settings.segment_pipeline_depth)
        while (text := await self.response.next_segment()) is not None:
            await slots.acquire()
            segment = Segment(segment_request_id(self.response.response_id, len(self.segments)))
            self.segments.append(segment)
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
                delivery_hold_s=self.reply.delivery_hold_s,
                playback_rate=opts.speed,
                model_options=opts.model_options,
                word_timings=opts.word_timings,
                realtime=opts.realtime,
            )
            stream = await self.reply.submit(request)
            if stream is None:  # refused (the client was told why): it fails in its turn
                slots.release()
                segment.events.put_nowait(Finished(segment.request_id, FinishReason.FAILED, 0))
                self._ordered.put_nowait(segment)
                break
            self._log.debug("segment %s submitted chars=%d", segment.request_id, len(text))
            self._spawn(self._collect(segment, stream, slots))
            self._ordered.put_nowait(segment)
        self._ordered.put_nowait(None)

    async def _submit_streamed(self) -> None:
        """One engine request for the whole streamed text: opened with its first whole word,
        every later piece appended as it comes (EngineClient.append_text)."""
        opening = await self.response.opening_text()
        if opening is None:  # closed (barge-in) before a word came
            self._ordered.put_nowait(None)
            return
        text, final = opening
        segment = Segment(f"{self.response.response_id}-s0")
        self.segments.append(segment)
        opts = self._options
        request = SpeechRequest(
            text,
            opts.voice,
            opts.sampling,
            segment.request_id,
            delivery_hold_s=self.reply.delivery_hold_s,
            playback_rate=opts.speed,
            model_options=opts.model_options,
            word_timings=opts.word_timings,
            text_stream=not final,
            realtime=opts.realtime,
        )
        stream = await self.reply.submit(request)
        if stream is None:  # refused (the client was told why)
            segment.events.put_nowait(Finished(segment.request_id, FinishReason.FAILED, 0))
        else:
            self._spawn(self._collect(segment, stream, asyncio.Semaphore(0)))
        self._ordered.put_nowait(segment)
        self._ordered.put_nowait(None)
        while stream is not None and not final:
            piece = await self.response.next_piece()
            if piece is None:  # closed without `final`: the run's end cancels the request
                return
            text, final = piece
            self._log.debug(
                "streamed text %s chars=%d final=%s", segment.request_id, len(text), final
            )
            self.reply.append_text(segment.request_id, text, final)

    async def _collect(
        self, segment: Segment, stream: ResponseStream, slots: asyncio.Semaphore
    ) -> None:
        try:
            async for event in stream:
                if isinstance(event, Finished):
                    self.reply.request_ended(segment.request_id)
                segment.events.put_nowait(event)
        finally:
            slots.release()

    # --- player ----------------------------------------------------------------------------
    async def _play_segment(self, segment: Segment, encoder: ChunkEncoder) -> _Outcome:
        segment.start_s = self._model_audio_s
        while True:
            event = await segment.events.get()
            if isinstance(event, AudioChunk):
                self._model_audio_s += event.duration_s
                # Cancelled or the engine lost midway: the rest of it is not encoded.
                await self.reply.send_chunk(
                    encoder, event, lambda: self._words.release(self.reply.audio_ms)
                )
                continue
            if isinstance(event, WordTimings):
                self._words.add(segment.start_s, event.words)
                continue
            status = self.reply.finished(event)  # one `length` segment makes the response so
            if status in (ResponseStatus.COMPLETED, ResponseStatus.LENGTH):
                self._words.release()  # the segment's audio is out (but a held-back frame)
                return _Outcome.NEXT
            return _Outcome.STOP
