"""One reply's life on the wire, shared by every kind of reply the gateway plays: TTS responses
(gateway/response.py), spoken turns (gateway/turn_reply.py) and full-duplex conversations
(gateway/duplex.py).

    CREATED ──start()──▶ STARTED ──done()──▶ DONE
       │                 response.started    response.done (status, audio_ms, ttfa_ms)
       └─────────────────────done()──────────▶ DONE, silently: a reply never started ends
                                                without a word (a refused duplex conversation)

Between the two events a `ReplyLifecycle`:

- submits the reply's engine requests (`submit`) and says why one was refused: `overloaded`,
  `bad_field` for bad input, else `internal` (non-fatal; the reply ends `failed`);
- maps each request's end to the reply's status (`finished`: FinishReason → ResponseStatus,
  `model_error` for a failed generation); the first `cancelled` or `failed` is final, and one
  request cut at `max_tokens` makes the whole reply `length`;
- owns the reply's output encoder and pacing (`play`, `send`): frames leave no faster than
  real time plus the lead (duplex replies are not paced: the engine's frame clock is), and a
  dead encoder process fails this reply alone with a non-fatal `internal` error;
- cancels (`cancel`: barge-in) and frees its engine requests however the reply ends, waiting
  for a submit still in flight to be admitted rather than letting a cancel overtake it;
- counts it: `voxgate_responses` by status, TTFA, underruns and audio sent.

What is a reply's own stays with it: a TTS response's sentence segments, a turn's transcript
and what the user heard of it, a conversation's input audio.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from engine.api import (
    AudioChunk,
    EngineClient,
    EngineDead,
    EngineOverloaded,
    Finished,
    FinishReason,
    ModelInputError,
    OptionValue,
    ResponseStream,
    SamplingParams,
    SpeechRequest,
)
from gateway.audio import ChunkEncoder, OpenEncoder
from gateway.codec_workers import CodecProcessFailed
from gateway.input_transcription import InputTranscription
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
    SpokenWord,
)
from gateway.stretched_audio import PlayedTime, at_speed
from models.tool_calls import FunctionTool

STATUS_OF: dict[FinishReason, ResponseStatus] = {
    FinishReason.STOP: ResponseStatus.COMPLETED,
    FinishReason.LENGTH: ResponseStatus.LENGTH,
    FinishReason.CANCELLED: ResponseStatus.CANCELLED,
    FinishReason.FAILED: ResponseStatus.FAILED,
}

# A reply in one of these states has ended for good: nothing that comes later changes it.
FINAL = (ResponseStatus.CANCELLED, ResponseStatus.FAILED)


@dataclass(frozen=True)
class Emitter:
    """Where a reply puts its output: the session's send queue (may raise SendQueueFull)."""

    event: Callable[[ServerEvent], None]
    audio: Callable[[bytes, int], None]  # (wire frame, its duration in ms)
    # What an `overloaded` refusal does instead of a non-fatal error, when set: a full-duplex
    # session ends (fatal error, close 1013), since its microphone keeps streaming and every
    # frame would otherwise ask the engine again.
    overloaded: Callable[[str], None] | None = None


@dataclass(frozen=True)
class SpeechOptions:
    """What `session.start` chose, for every reply of the session."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    voice: str | None = None
    output: AudioSpec = field(default_factory=AudioSpec)
    # The model options the client set (checked; the model fills in the rest).
    model_options: Mapping[str, OptionValue] = field(default_factory=dict)
    # Turn-based models with a system prompt (ModelFacts.system_prompt): the Realtime API's
    # `instructions`, given with each user turn from now on (None: the model's default).
    instructions: str | None = None
    # Responses send `response.words` (the model times its words: ModelFacts.word_timings).
    word_timings: bool = False
    # OpenAI's `speed`: replies are time-stretched to it, pitch unchanged (1.0: as the model
    # speaks; gateway/stretched_audio.py).
    speed: float = 1.0
    # Turn-based models with tool calls (ModelFacts.tool_call_syntax): the tools written into
    # each reply's prompt (the Realtime API's `tools`, unless `tool_choice` is `none`).
    tools: tuple[FunctionTool, ...] = ()
    # Whether someone plays the replies as they are made (SpeechRequest.realtime): False for
    # `POST /v1/audio/speech` with `realtime: false`, a file to keep or a batch job.
    realtime: bool = True
    # Turn-based models: transcripts of the user's spoken turns, as asked (the Realtime API's
    # input_audio_transcription; gateway/input_transcription.py); None: none.
    input_transcription: InputTranscription | None = None


class ReplyState(enum.Enum):
    CREATED = enum.auto()  # nothing sent yet
    STARTED = enum.auto()  # `response.started` sent
    DONE = enum.auto()  # `response.done` sent (or, never started, nothing will be)


class RequestState(enum.Enum):
    """One engine request of a reply, as far as cancelling it goes."""

    SUBMITTING = enum.auto()  # engine.submit in flight
    GENERATING = enum.auto()  # admitted, not finished
    REFUSED = enum.auto()  # submit raised: the client was told why
    ENDED = enum.auto()  # finished, or cancelled: nothing more to free


def submit_error(exc: Exception) -> ErrorCode:
    """The protocol's error code for an engine refusing a request."""
    if isinstance(exc, EngineOverloaded):
        return ErrorCode.OVERLOADED
    if isinstance(exc, ModelInputError | ValueError):
        return ErrorCode.BAD_FIELD
    return ErrorCode.INTERNAL


def combined(current: ResponseStatus, new: ResponseStatus) -> ResponseStatus:
    """The reply's status after one more of its requests ended with `new`: `cancelled` and
    `failed` are final (the first one wins), `length` outweighs `completed`."""
    if current in FINAL or new is ResponseStatus.COMPLETED:
        return current
    return new


class ReplyLifecycle:
    """One reply, from `response.started` to `response.done` (module docstring)."""

    def __init__(
        self,
        response_id: str,
        engine: EngineClient,
        output: AudioSpec,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        log: logging.LoggerAdapter | logging.Logger,
        *,
        kind: str = "response",  # how the log names it: response, reply, conversation
        lead_s: float | None = None,  # pacing lead; None: frames go out as they come
        speed: float = 1.0,  # the listener hears the model's audio at this rate
        echo: object = None,  # ResponseStarted.echo: the adapter's data for this reply
        options: SpeechOptions | None = None,  # ResponseStarted.options: what it runs with
    ) -> None:
        self.response_id = response_id
        self._echo, self._options = echo, options
        self.kind = kind
        self.state = ReplyState.CREATED
        self.status = ResponseStatus.COMPLETED
        self.audio_ms = 0
        self.ttfa_ms: int | None = None
        self.generated_tokens = 0  # by the reply's engine requests, as they finish
        self._engine, self._output, self._emit = engine, output, emit
        self._metrics, self._open_encoder, self._log = metrics, open_encoder, log
        # The listener's playback as the server can tell (from the first frame, in real time):
        # a paced reply releases its frames by it; every reply's encoder ranks its calls by
        # when it runs dry (`needed_by`).
        self._paced = lead_s is not None
        self._playback = PlaybackClock(lead_s if lead_s is not None else math.inf)
        # audio_ms, the pacing and heard_s are played time; the engine's requests model time.
        self.time = PlayedTime(speed)
        self._stopped = asyncio.Event()  # set by a barge-in: no more audio goes out
        # Set by a barge-in or the engine's loss: frames waiting for their pacing slot are
        # dropped, so the loss is told at once, not after the audio already made plays out.
        self._halted = asyncio.Event()
        self._requests: dict[str, RequestState] = {}
        self._submits: dict[str, asyncio.Future] = {}  # submits in flight, by request id
        self._first_submit: float | None = None

    @property
    def cancelled(self) -> bool:
        return self._stopped.is_set()

    @property
    def paced(self) -> bool:
        """Frames leave on a playback clock (heard_s can say how much the user heard)."""
        return self._paced

    @property
    def underruns(self) -> int:
        return self._playback.underruns if self._paced else 0

    # --- the two events ----------------------------------------------------------------------
    def start(self) -> None:
        """`response.started`."""
        assert self.state is ReplyState.CREATED, self.state
        self.state = ReplyState.STARTED
        self._emit.event(ResponseStarted(self.response_id, self._echo, self._options))

    def done(
        self, details: str = "", heard_words: tuple[SpokenWord, ...] | None = None
    ) -> ResponseStatus:
        """`response.done` with the reply's status (and, for a reply cut short, the words the
        user heard), counted and logged (`details`: what the reply adds to the log line).
        Raises EngineDead afterwards if the engine loop has stopped: no session can be
        served, so the session closes with 1011."""
        started = self.state is ReplyState.STARTED
        self.state = ReplyState.DONE
        if started:
            self._metrics.responses.labels(self.status.value).inc()
            self._emit.event(
                ResponseDone(
                    self.response_id, self.status, self.audio_ms, self.ttfa_ms, heard_words
                )
            )
            self._log.info(
                "%s done id=%s status=%s audio_ms=%d ttfa_ms=%s underruns=%d%s",
                self.kind,
                self.response_id,
                self.status.value,
                self.audio_ms,
                self.ttfa_ms,
                self.underruns,
                f" {details}" if details else "",
            )
        if not self._engine.ready:
            raise EngineDead("the engine loop stopped")
        return self.status

    # --- engine requests ---------------------------------------------------------------------
    async def submit(self, request: SpeechRequest) -> ResponseStream | None:
        """Submit one of the reply's requests (its `request_id` set). None when it was not
        admitted: the engine refused it (the client gets a non-fatal `error` now), or the reply
        was cancelled before it was sent. A reply that goes on ends that request with
        `finished(Finished(request_id, FAILED, 0))` when its end is due (no second error)."""
        request_id = request.request_id
        assert request_id is not None, "a reply's requests carry their id"
        if self.cancelled:
            return None
        if self._first_submit is None:
            self._first_submit = time.monotonic()  # TTFA counts from here
        self._requests[request_id] = RequestState.SUBMITTING
        # Shielded: a cancel of the awaiting task (barge-in, disconnect) must not abandon a
        # submit the engine is about to answer; the request is cancelled once admitted instead.
        submit = asyncio.ensure_future(self._engine.submit(request))
        self._submits[request_id] = submit
        try:
            stream = await asyncio.shield(submit)
        except asyncio.CancelledError:  # the caller gave up: nobody will read this request
            self._cancel_request(request_id)
            raise
        except Exception as exc:  # noqa: BLE001 - refused: say why, the session stays usable
            self._submits.pop(request_id, None)
            self._requests[request_id] = RequestState.REFUSED
            self._refused(exc)
            return None
        self._submits.pop(request_id, None)
        if self._requests[request_id] is RequestState.SUBMITTING:
            self._requests[request_id] = RequestState.GENERATING
        stream.on_lost(self._halted.set)
        return stream

    def _refused(self, exc: Exception) -> None:
        code = submit_error(exc)
        if code is ErrorCode.INTERNAL and self._engine.ready:
            self._log.exception("engine submit failed")
        message = str(exc) or type(exc).__name__
        if code is ErrorCode.OVERLOADED and self._emit.overloaded is not None:
            self._emit.overloaded(message)
        else:
            self._emit.event(ErrorEvent(code, message))

    def generating(self, request_id: str) -> bool:
        """The request is admitted and still generating (not finished, not cancelled)."""
        return self._requests.get(request_id) is RequestState.GENERATING

    def report_playback(self, request_id: str, played_s: float) -> None:
        """The listener's position in one request's audio, in model time (`self.time`), for
        the engine's scheduler."""
        if self.generating(request_id):
            self._engine.report_playback(request_id, played_s)

    def append_text(self, request_id: str, text: str, final: bool) -> None:
        """More text for a streamed-text request (SpeechRequest.text_stream), while it runs."""
        if self.generating(request_id):
            self._engine.append_text(request_id, text, final)

    def request_ended(self, request_id: str) -> None:
        """The engine finished the request: there is nothing left to cancel."""
        if self._requests.get(request_id) is not RequestState.REFUSED:
            self._requests[request_id] = RequestState.ENDED

    def finished(self, event: Finished) -> ResponseStatus:
        """One request's end: its status (returned), folded into the reply's. A failed
        generation is told to the client (`model_error`); a request that was refused (the
        client has its `error`) or never sent ends without a word."""
        told = self._requests.get(event.request_id) in (RequestState.REFUSED, None)
        self.request_ended(event.request_id)
        self.generated_tokens += event.num_tokens
        status = STATUS_OF[event.reason]
        if status is ResponseStatus.FAILED and not told:
            self._emit.event(ErrorEvent(ErrorCode.MODEL_ERROR, event.error or "generation failed"))
        self.status = combined(self.status, status)
        return status

    def fail(self, code: ErrorCode, message: str) -> None:
        """The reply fails: a non-fatal `error` now, `response.done` `failed` at its end."""
        self._emit.event(ErrorEvent(code, message))
        self.status = combined(self.status, ResponseStatus.FAILED)

    def cancel(self) -> None:
        """Barge-in: the reply ends `cancelled`, no more of its audio is sent, and its engine
        requests end within one engine step. Safe to call more than once."""
        if not self.cancelled:
            self.status = combined(self.status, ResponseStatus.CANCELLED)
            self._stopped.set()
            self._halted.set()
        self.cancel_engine_requests()

    def cancel_engine_requests(self) -> None:
        """Free every request still generating, without a word to the client (the session
        going away, the reply's end); safe to call more than once."""
        for request_id in list(self._requests):
            self._cancel_request(request_id)

    def _cancel_request(self, request_id: str) -> None:
        if self._requests[request_id] not in (RequestState.SUBMITTING, RequestState.GENERATING):
            return
        self._requests[request_id] = RequestState.ENDED
        submit = self._submits.get(request_id)
        if submit is not None and not submit.done():
            # Not admitted yet: cancel once it is (a cancel sent now could overtake it).
            submit.add_done_callback(self._cancel_when_admitted(request_id))
        else:
            self._engine.cancel(request_id)

    def _cancel_when_admitted(self, request_id: str) -> Callable[[asyncio.Future], None]:
        def callback(submit: asyncio.Future) -> None:
            if not submit.cancelled() and submit.exception() is None:
                self._engine.cancel(request_id)

        return callback

    # --- audio out ---------------------------------------------------------------------------
    async def play(self, body: Callable[[ChunkEncoder], Awaitable[None]]) -> None:
        """Run `body` with the reply's output encoder. A dead encoder process fails this reply
        alone (a non-fatal `internal` error; the session goes on). However it ends — also
        cancelled, or raising — the encoder is closed and the reply's engine requests still
        generating are cancelled."""
        encoder: ChunkEncoder | None = None
        try:
            opened = self._open_encoder(self._output, self._engine.facts.sample_rate)
            # When the listener needs the next chunk: the encoder processes run the calls
            # waiting together by it.
            opened.needed_by = self._playback.runs_dry_at
            encoder = at_speed(opened, self.time.speed)
            await body(encoder)
        except CodecProcessFailed as exc:  # --encode-processes: its worker is gone
            self._log.error("%s %s: %s", self.kind, self.response_id, exc)
            self.fail(ErrorCode.INTERNAL, str(exc))
        finally:
            if encoder is not None:
                encoder.close()
            self.cancel_engine_requests()

    async def send_chunk(
        self,
        encoder: ChunkEncoder,
        chunk: AudioChunk,
        after_part: Callable[[], None] | None = None,
    ) -> bool:
        """Encode an engine chunk and send it part by part as the encoder makes them (its first
        part soonest), `after_part` called after each; its delivery is timed at its first.
        False once the reply was cancelled or its engine lost: the rest is not encoded."""
        made_s = chunk.made_s
        async for frames in encoder.encode_parts(chunk.pcm):
            if not await self.send(frames, made_s):
                return False
            made_s = None
            if after_part is not None:
                after_part()
        return True

    async def send(self, frames: list[bytes], made_s: float | None = None) -> bool:
        """Send frames in order, each once its pacing slot comes. False once the reply was
        cancelled or its engine lost: the frames not yet sent are dropped. `made_s`: when the
        engine had the audio of the first of them (AudioChunk.made_s), to time its delivery
        up to here (voxgate_audio_delivery_seconds; pacing is no delay, so not counted)."""
        if made_s is not None and frames:
            self._metrics.audio_delivery.observe(max(time.monotonic() - made_s, 0.0))
        frame_ms = self._output.frame_ms
        for frame in frames:
            if not await self._slot(frame_ms / 1000):
                return False
            self._emit.audio(frame, frame_ms)
            self.audio_ms += frame_ms
            self._metrics.audio_sent.inc(frame_ms / 1000)
            if self.ttfa_ms is None:
                start = self._first_submit if self._first_submit is not None else time.monotonic()
                ttfa_s = time.monotonic() - start
                self.ttfa_ms = round(ttfa_s * 1000)
                self._metrics.ttfa.observe(ttfa_s)
        if not self._paced and frames:  # they left at once: one mark for them all
            self._playback.mark_sent(len(frames) * frame_ms / 1000)
        return True

    async def _slot(self, frame_s: float) -> bool:
        """Wait until the next frame may leave; False once a barge-in stopped the reply or its
        engine was lost."""
        if self._halted.is_set():
            return False
        if not self._paced:
            return True
        pause = self._playback.wait_s()
        if pause > 0:
            try:
                async with asyncio.timeout(pause):
                    await self._halted.wait()
                return False
            except TimeoutError:
                pass
        if self._playback.mark_sent(frame_s):
            self._metrics.underruns.inc()
        return True

    @property
    def delivery_hold_s(self) -> float:
        """What the reply's encoding keeps back of each chunk (SpeechRequest.delivery_hold_s)."""
        return self.time.delivery_hold_s(self._output, self._engine.facts.sample_rate)

    def heard_s(self, reported_s: float | None) -> float:
        """How much of the reply the user has heard, in played time: the client's playback
        report when there is one (never more than was sent), else the server's send clock."""
        assert self._paced, "only a paced reply's send clock tells what was heard"
        if reported_s is not None:
            return min(reported_s, self._playback.sent_s)
        return self._playback.position()
