"""One reply of a turn-based speech-to-speech session: a single engine request that answers the
conversation so far, its audio paced out like any response, and its end told the way the
history needs it: the generated ids and how much of the reply the user actually heard.

A barge-in (`cancel`) is cooperative, not a task cancel: the engine request is cancelled
(within one engine step), audio not yet sent is dropped at once, and the run still waits for
the engine's `Finished`, whose `output_ids` the history needs to keep what was heard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from engine.api import (
    AudioChunk,
    EngineClient,
    EngineOverloaded,
    Finished,
    FinishReason,
    ModelInputError,
    SpeechRequest,
    TextDelta,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.config import GatewaySettings
from gateway.encode_workers import EncoderProcessFailed
from gateway.metrics import GatewayMetrics
from gateway.pacing import PlaybackClock
from gateway.protocol import (
    ErrorCode,
    ErrorEvent,
    ResponseStarted,
    ResponseStatus,
    TranscriptDelta,
)
from gateway.response import Emitter, SpeechOptions

log = logging.getLogger("voxgate.gateway")

_STATUS = {
    FinishReason.STOP: ResponseStatus.COMPLETED,
    FinishReason.LENGTH: ResponseStatus.LENGTH,
    FinishReason.CANCELLED: ResponseStatus.CANCELLED,
    FinishReason.FAILED: ResponseStatus.FAILED,
}


@dataclass(frozen=True)
class ReplyOutcome:
    status: ResponseStatus
    output_ids: tuple  # the generated tokens (Finished.output_ids)
    heard_s: float | None  # None: the user heard all of it; else how much (barge-in, failure)
    audio_ms: int
    ttfa_ms: int | None
    streamed_text: bool  # transcript deltas came from the engine as it generated
    reused_tokens: int  # prompt tokens whose KV came from the conversation's previous turn


class TurnReply:
    def __init__(
        self,
        response_id: str,
        engine: EngineClient,
        settings: GatewaySettings,
        options: SpeechOptions,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
    ) -> None:
        self.response_id = response_id
        self._engine, self._settings, self._options = engine, settings, options
        self._emit, self._metrics, self._open_encoder = emit, metrics, open_encoder
        self._clock = PlaybackClock(settings.lead_ms / 1000)
        self._stopped = asyncio.Event()  # barge-in: stop sending now
        self._submitted = False
        self._finished = False
        self._played_s: float | None = None  # the client's own playback report
        self.cancelled = False

    # --- control, from the session's reader ------------------------------------------------
    def cancel(self) -> None:
        """Barge-in: the engine request ends within one step; no more audio is sent."""
        if self.cancelled:
            return
        self.cancelled = True
        self._stopped.set()
        if self._submitted and not self._finished:
            self._engine.cancel(self.response_id)

    def report_playback(self, played_ms: float) -> None:
        self._played_s = played_ms / 1000
        if self._submitted and not self._finished:
            self._engine.report_playback(self.response_id, self._played_s)

    def heard_s(self) -> float:
        """What the user has heard: their report when they sent one, else the send clock."""
        sent = self._clock.sent_s
        return min(self._played_s, sent) if self._played_s is not None else self._clock.position()

    # --- the run ---------------------------------------------------------------------------
    async def run(self, turns: tuple, conversation_id: str) -> ReplyOutcome:
        self._emit.event(ResponseStarted(self.response_id))
        request = SpeechRequest(
            "",
            None,
            self._options.sampling,
            self.response_id,
            turns=turns,
            conversation_id=conversation_id,
            delivery_hold_s=self._options.output.frame_ms / 1000,
        )
        started = time.monotonic()
        if self.cancelled:  # interrupted before the engine saw it
            return self._outcome(Finished(self.response_id, FinishReason.CANCELLED, 0), 0, None)
        try:
            self._submitted = True
            stream = await self._engine.submit(request)
        except Exception as exc:  # noqa: BLE001 - refused: say why, the session stays usable
            self._submitted = False
            code = ErrorCode.OVERLOADED if isinstance(exc, EngineOverloaded) else ErrorCode.INTERNAL
            if isinstance(exc, ModelInputError | ValueError):
                code = ErrorCode.BAD_FIELD
            message = str(exc) or type(exc).__name__
            self._emit.event(ErrorEvent(code, message))
            return self._outcome(Finished(self.response_id, FinishReason.FAILED, 0), 0, None)
        audio_ms, ttfa_ms, streamed_text = 0, None, False
        finished: Finished | None = None
        encoder: ChunkEncoder | None = None

        async def play(frames: list[bytes]) -> None:
            nonlocal audio_ms, ttfa_ms
            for frame in frames:
                if not await self._paced():
                    return
                self._emit.audio(frame, self._options.output.frame_ms)
                audio_ms += self._options.output.frame_ms
                if ttfa_ms is None:
                    ttfa_ms = round((time.monotonic() - started) * 1000)
                    self._metrics.ttfa.observe(ttfa_ms / 1000)

        try:
            encoder = self._open_encoder(self._options.output, self._engine.facts.sample_rate)
            async for event in stream:
                if isinstance(event, Finished):
                    finished = event
                    await play(await encoder.flush())
                elif self.cancelled:
                    continue  # barge-in: what is still coming is dropped
                elif isinstance(event, TextDelta):
                    streamed_text = True
                    self._emit.event(TranscriptDelta(self.response_id, event.text))
                else:
                    assert isinstance(event, AudioChunk)
                    async for frames in encoder.encode_parts(event.pcm):
                        await play(frames)
                        if self.cancelled:  # barge-in: encode no more of it
                            break
        except EncoderProcessFailed as exc:  # its worker process is gone: this reply alone
            log.error("reply %s: %s", self.response_id, exc)
            self._emit.event(ErrorEvent(ErrorCode.INTERNAL, str(exc)))
            failed = Finished(self.response_id, FinishReason.FAILED, 0)
            return self._outcome(failed, audio_ms, ttfa_ms, streamed_text)
        finally:
            if encoder is not None:
                encoder.close()
            self._finished = True
            if finished is None:  # the session is going away mid-reply, or the encoder failed
                self._engine.cancel(self.response_id)
        assert finished is not None
        if finished.reason is FinishReason.FAILED:
            message = finished.error or "generation failed"
            self._emit.event(ErrorEvent(ErrorCode.MODEL_ERROR, message))
        return self._outcome(finished, audio_ms, ttfa_ms, streamed_text)

    async def _paced(self) -> bool:
        """Wait for the frame's slot; False once a barge-in stopped the reply."""
        if self._stopped.is_set():
            return False
        delay = self._clock.delay()
        if delay > 0:
            try:
                async with asyncio.timeout(delay):
                    await self._stopped.wait()
                return False
            except TimeoutError:
                pass
        frame_s = self._options.output.frame_ms / 1000
        if self._clock.mark_sent(frame_s):
            self._metrics.underruns.inc()
        self._metrics.audio_sent.inc(frame_s)
        return True

    def _outcome(
        self, finished: Finished, audio_ms: int, ttfa_ms: int | None, streamed: bool = False
    ) -> ReplyOutcome:
        status = ResponseStatus.CANCELLED if self.cancelled else _STATUS[finished.reason]
        whole = status in (ResponseStatus.COMPLETED, ResponseStatus.LENGTH)
        return ReplyOutcome(
            status,
            tuple(finished.output_ids),
            None if whole else self.heard_s(),
            audio_ms,
            ttfa_ms,
            streamed,
            finished.reused_tokens,
        )
