"""One reply of a turn-based speech-to-speech session: a single engine request that answers the
conversation so far, its audio paced out like any response, and its end told the way the
history needs it: the generated ids and how much of the reply the user actually heard.

A barge-in (`cancel`) is cooperative, not a task cancel: the engine request is cancelled
(within one engine step), audio not yet sent is dropped at once, and the run still waits for
the engine's `Finished`, whose `output_ids` the history needs to keep what was heard.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from engine.api import (
    MAX_AUDIBLE_AFTER_S,
    AudioChunk,
    EngineClient,
    Finished,
    FinishReason,
    SpeechRequest,
    TextDelta,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.protocol import ResponseStatus, TranscriptDelta
from gateway.reply import Emitter, ReplyLifecycle, SpeechOptions


@dataclass(frozen=True)
class ReplyOutcome:
    status: ResponseStatus
    output_ids: tuple  # the generated tokens (Finished.output_ids)
    # None: the user heard all of it; else how much of the model's audio (barge-in, failure)
    heard_s: float | None
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
        log: logging.LoggerAdapter | logging.Logger,
        echo: object = None,  # ResponseStarted.echo (ResponseOverrides.echo)
    ) -> None:
        self.response_id = response_id
        self._options, self._emit = options, emit
        self.reply = ReplyLifecycle(
            response_id,
            engine,
            options.output,
            emit,
            metrics,
            open_encoder,
            log,
            kind="reply",
            lead_s=settings.lead_ms / 1000,
            speed=options.speed,
            echo=echo,
            options=options,
        )
        self._played_s: float | None = None  # the client's own playback report
        self._finished: Finished | None = None
        self._streamed_text = False

    # --- control, from the session's reader ------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self.reply.cancelled

    def cancel(self) -> None:
        """Barge-in: the engine request ends within one step; no more audio is sent."""
        self.reply.cancel()

    def report_playback(self, played_ms: float) -> None:
        self._played_s = played_ms / 1000
        self.reply.report_playback(self.response_id, self.reply.time.model_s(self._played_s))

    def heard_s(self) -> float:
        """What the user has heard of the model's audio (model time, as the history cuts it):
        their report when they sent one, else the send clock."""
        return self.reply.time.model_s(self.reply.heard_s(self._played_s))

    # --- the run ---------------------------------------------------------------------------
    async def run(
        self, turns: tuple, conversation_id: str, audible_at: float | None = None
    ) -> ReplyOutcome:
        """Play the reply to its end and say what the history keeps of it. The caller ends it
        with `done` (after any transcript of its own). `audible_at`: a speculative reply's
        monotonic time before which its audio is held from the user (the engine ranks it
        from then: SpeechRequest.audible_after_s)."""
        self.reply.start()
        if not self.cancelled:  # interrupted before the engine saw it: nothing to play
            request = SpeechRequest(
                "",
                None,
                self._options.sampling,
                self.response_id,
                turns=turns,
                conversation_id=conversation_id,
                delivery_hold_s=self.reply.delivery_hold_s,
                playback_rate=self._options.speed,
                audible_after_s=_hold_s(audible_at),
            )
            await self.reply.play(lambda encoder: self._play(request, encoder))
        finished = self._finished or Finished(self.response_id, FinishReason.CANCELLED, 0)
        status = self.reply.status
        whole = status in (ResponseStatus.COMPLETED, ResponseStatus.LENGTH)
        return ReplyOutcome(
            status,
            tuple(finished.output_ids),
            None if whole else self.heard_s(),
            self._streamed_text,
            finished.reused_tokens,
        )

    async def _play(self, request: SpeechRequest, encoder: ChunkEncoder) -> None:
        stream = await self.reply.submit(request)
        if stream is None:  # refused (the client was told why), or cut before it was sent
            self.reply.finished(Finished(self.response_id, FinishReason.FAILED, 0))
            return
        # A barge-in does not end this loop: the engine's Finished still comes (within one
        # step), and its output_ids are what the history keeps of what was heard.
        async for event in stream:
            if isinstance(event, Finished):
                self._finished = event
                self.reply.finished(event)
                await self.reply.send(await encoder.flush())
            elif self.cancelled:
                continue  # barge-in: what is still coming is dropped
            elif isinstance(event, TextDelta):
                self._streamed_text = True
                self._emit.event(TranscriptDelta(self.response_id, event.text))
            else:
                assert isinstance(event, AudioChunk)
                await self.reply.send_chunk(encoder, event)  # a barge-in stops it midway

    def done(self, details: str) -> ResponseStatus:
        """`response.done`; raises EngineDead when the engine loop has stopped."""
        return self.reply.done(details)


def _hold_s(audible_at: float | None) -> float:
    """Seconds from now until `audible_at` (monotonic), within the engine's bounds."""
    if audible_at is None:
        return 0.0
    return min(max(audible_at - time.monotonic(), 0.0), MAX_AUDIBLE_AFTER_S)
