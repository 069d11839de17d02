"""One WebSocket connection: an explicit state machine with a reader, a writer and a player.

    AWAITING_START ─session.start─▶ ACTIVE ─session.end / idle / fatal─▶ CLOSING ─▶ CLOSED
          │                                                            ▲
          └──── start timeout / bad first message / disconnect ────────┘

- The reader decodes client frames (gateway.protocol) and acts on them at once, so control
  (`response.cancel`, `session.end`) overtakes audio still waiting for its pacing slot.
- The player plays queued responses one after another (gateway.playlist, gateway.response).
- The writer is the only task that writes to the socket; it drains the bounded send queue.

Every way out (client close, network drop, timeout, slow reader, engine failure) ends in the
same teardown, which cancels the session's engine requests. Disconnect is an event, not a crash.

The session acts on native events only; its `Wire` (gateway.wire) turns socket frames into them
and them into socket frames: the native protocol on `/v1/stream`, adapters on `/v1/realtime`
(OpenAI Realtime) and `/v1/twilio` (Twilio Media Streams). One session layer serves all three.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Sequence

from starlette.status import WS_1001_GOING_AWAY
from starlette.types import Message
from starlette.websockets import WebSocket

from engine.api import EngineClient, EngineDead
from gateway.admission import AdmissionRefusal, admission_refusal
from gateway.audio import OpenEncoder
from gateway.audio_in import UndecodableAudio
from gateway.client_voices import ClientVoices
from gateway.config import GatewaySettings
from gateway.duplex import DuplexConversation, OpenMicDecoder
from gateway.input_transcription import InputTranscriber
from gateway.metrics import GatewayMetrics
from gateway.pacing import SendQueue, SendQueueFull
from gateway.playlist import ResponseQueue
from gateway.protocol import (
    AudioInput,
    AudioSpec,
    CloseCode,
    EndReason,
    ErrorCode,
    ErrorEvent,
    InputCommit,
    Playback,
    ProtocolError,
    ResponseCancel,
    SessionEnd,
    SessionEnded,
    SessionStart,
    TextInput,
    TurnDetection,
)
from gateway.reply import Emitter
from gateway.session_reader import FrameTooLarge, SessionReader, Silence
from gateway.session_start import (
    check_overrides,
    input_audio_of,
    resolve_options,
    started_event,
    update_options,
)
from gateway.session_state import CloseRequest, SessionLog, SessionState
from gateway.session_voices import SessionVoices
from gateway.socket_items import OutClose, OutItem, OutText
from gateway.socket_writer import SocketWriter
from gateway.speech_conversation import SpeechConversation
from gateway.tasks import cancel_and_wait
from gateway.turns import TurnConversation
from gateway.wire import (
    InputClear,
    Reply,
    SessionUpdate,
    SessionUpdated,
    Truncate,
    Wire,
    WireEvent,
    WireInput,
    overrides_of,
)

log = logging.getLogger("voxgate.gateway")

# Before `session.start` every error is fatal; the close code says which kind it was.
_START_CLOSE_CODES = {
    ErrorCode.BAD_JSON: CloseCode.INVALID_PAYLOAD,
    ErrorCode.BAD_FIELD: CloseCode.INVALID_PAYLOAD,
    ErrorCode.UNSUPPORTED_AUDIO: CloseCode.UNSUPPORTED_DATA,
}


class Session:
    def __init__(
        self,
        ws: WebSocket,
        engine: EngineClient,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        principal_label: str = "anonymous",
        wire: Wire | None = None,
        client_voices: ClientVoices | None = None,
        open_mic_decoder: OpenMicDecoder | None = None,
        transcriber: InputTranscriber | None = None,
    ) -> None:
        self.session_id = f"sess_{uuid.uuid4().hex[:16]}"
        self.state = SessionState.AWAITING_START
        self.log = SessionLog(log, {"session_id": self.session_id})
        self._ws = ws
        self._engine = engine
        self._settings = settings
        self._metrics = metrics
        self._principal = principal_label
        self._wire = wire if wire is not None else Wire()  # the native protocol by default
        self._voices = SessionVoices(engine, principal_label, client_voices)
        self._reader = SessionReader(ws, self._wire, settings)
        self._sendq = SendQueue(settings.max_send_queue_ms, settings.max_send_queue_events)
        self._close: CloseRequest | None = None
        self._closing = asyncio.Event()
        self._writer = SocketWriter(ws, self._sendq, self.log)
        self._peer_left = False  # the reader saw the client disconnect
        self._responses = ResponseQueue(
            engine,
            settings,
            Emitter(self._emit_event, self._emit_audio),
            metrics,
            open_encoder,
            self.log,
        )
        # Speech-to-speech models converse instead of playing text responses: Moshi in one
        # continuous full-duplex conversation, GLM-4-Voice in turns (gateway/speech_conversation.py).
        duplex = engine.facts.full_duplex
        emit = Emitter(self._emit_event, self._emit_audio, self._overloaded if duplex else None)
        self._speech: SpeechConversation | None = (
            DuplexConversation(
                engine,
                emit,
                metrics,
                open_encoder,
                self.log,
                settings.close_timeout_s,
                open_mic_decoder,
            )
            if duplex
            else TurnConversation.for_engine(
                engine,
                self.session_id,
                settings,
                emit,
                metrics,
                open_encoder,
                self.log,
                transcriber,
            )
        )

    # --- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the (already accepted) socket until the session ends, however it ends."""
        self.log.info("session open key=%s", self._principal)
        reader = asyncio.create_task(self._read_loop(), name=f"{self.session_id}-reader")
        writer = asyncio.create_task(self._writer.run(), name=f"{self.session_id}-writer")
        play = self._speech.run() if self._speech is not None else self._responses.play()
        player = asyncio.create_task(play, name=f"{self.session_id}-player")
        closing = asyncio.create_task(self._closing.wait())
        try:
            await asyncio.wait(
                {reader, writer, player, closing}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in (reader, writer, player):
                if task.done() and not task.cancelled() and task.exception() is not None:
                    self._task_failed(task.exception())
        finally:
            closing.cancel()
            await self._teardown(reader, writer, player)

    @property
    def busy(self) -> bool:
        """A response is being made or played: a stopping server waits for it (Gateway.drain)."""
        conversation = self._speech
        return self._responses.busy or (conversation is not None and conversation.busy)

    def go_away(self) -> None:
        """The server is stopping: close with 1001 (going away) once what is queued is sent."""
        self._begin_close(WS_1001_GOING_AWAY, "server shutting down")

    def _task_failed(self, exc: BaseException) -> None:
        if isinstance(exc, SendQueueFull):
            return  # already turned into a 1008 close by _put
        if isinstance(exc, EngineDead):
            self.log.error("engine unavailable: %s", exc)
            message = f"the engine stopped: {exc}"
        else:
            self.log.error("session task failed", exc_info=exc)
            message = "internal error"
        self._begin_close(
            CloseCode.INTERNAL_ERROR,
            "internal error",
            ErrorEvent(ErrorCode.INTERNAL, message, True),
        )

    def _begin_close(
        self,
        code: CloseCode,
        reason: str,
        error: ErrorEvent | None = None,
        ended: EndReason | None = None,
        drain: bool = True,
        error_counted: bool = False,
    ) -> None:
        """Decide how the session ends; the first decision wins. Nothing is queued after the
        final events, so they are the last thing the client reads before the close frame.
        `error_counted`: the error is in voxgate_errors already (a refusal, counted with its
        cause)."""
        if self._close is not None:
            return
        self._close = CloseRequest(code, reason, drain)
        self.state = SessionState.CLOSING
        if drain and error is not None:
            if not error_counted:
                self._metrics.errors.labels(error.code.value).inc()
            for item in self._wire.encode_event(error):
                self._sendq.put_final(item)
        if drain and ended is not None:
            for item in self._wire.encode_event(SessionEnded(ended)):
                self._sendq.put_final(item)
        self._closing.set()

    async def _teardown(
        self, reader: asyncio.Task, writer: asyncio.Task, player: asyncio.Task
    ) -> None:
        self.state = SessionState.CLOSING
        await cancel_and_wait(reader)
        self._reader.close()
        await self._responses.stop()  # cancels the session's engine requests
        if self._speech is not None:
            self._speech.stop()
        await cancel_and_wait(player)
        close = self._close
        if self._disconnected or close is None:
            await cancel_and_wait(writer)
        elif close.drain:
            self._sendq.put_final(OutClose(close.code, close.reason))
            done, _ = await asyncio.wait({writer}, timeout=self._settings.close_timeout_s)
            if not done:
                await cancel_and_wait(writer)
        else:
            self._sendq.clear()
            await cancel_and_wait(writer)  # it may be blocked in a send that will never finish
            await self._writer.close_stuck(close.code, close.reason, self._settings.close_timeout_s)
        code = close.code if close and not self._disconnected else "disconnect"
        self._metrics.sessions_closed.labels(str(code)).inc()
        self.state = SessionState.CLOSED
        self.log.info(
            "session closed code=%s duration_s=%.1f responses=%d",
            code,
            time.monotonic() - self._reader.opened_at,
            self._responses.opened + (self._speech.replies if self._speech is not None else 0),
        )

    @property
    def _disconnected(self) -> bool:
        return self._peer_left or self._writer.disconnected

    # --- output ----------------------------------------------------------------------------
    def _put(self, item: OutItem) -> None:
        if self.state >= SessionState.CLOSING:
            return  # the session is ending: only its final events go out
        try:
            self._sendq.put(item)
        except SendQueueFull as exc:
            self.log.warning("client is not reading (%s): closing", exc)
            self._metrics.slow_clients.inc()
            self._begin_close(CloseCode.POLICY, "client is not reading", drain=False)
            raise

    def _emit_event(self, event: WireEvent) -> None:
        if isinstance(event, ErrorEvent):
            self._metrics.errors.labels(event.code.value).inc()
        for item in self._wire.encode_event(event):
            self._put(item)

    def _emit_audio(self, data: bytes, duration_ms: int) -> None:
        for item in self._wire.encode_audio(data, duration_ms):
            self._put(item)

    def _error(self, code: ErrorCode, message: str, param: str | None = None) -> None:
        self._emit_event(ErrorEvent(code, message, fatal=False, param=param))

    def _fatal(self, code: ErrorCode, message: str, close: CloseCode) -> None:
        self.log.info("fatal %s: %s", code.value, message)
        self._begin_close(close, code.value, ErrorEvent(code, message, fatal=True))

    def _refused(self, refusal: AdmissionRefusal) -> None:
        """The engine cannot take this session now: the refusal counted (its error and its
        cause, GatewayMetrics.count_refused) and the session closed with it (1013)."""
        self._metrics.count_refused(refusal)
        self.log.info("fatal %s: %s", refusal.code.value, refusal.message)
        error = ErrorEvent(refusal.code, refusal.message, fatal=True)
        self._begin_close(CloseCode.TRY_AGAIN_LATER, refusal.code.value, error, error_counted=True)

    def _overloaded(self, message: str) -> None:
        """The engine refused the session's conversation for room (counted by the engine, by
        cause): the session ends (1013)."""
        self._fatal(ErrorCode.OVERLOADED, message, CloseCode.TRY_AGAIN_LATER)

    # --- reader ----------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        await self._act_on(self._wire.opening())
        while self.state < SessionState.CLOSING:
            message = await self._receive()
            if message is None:
                return
            if message["type"] == "websocket.disconnect":
                self._peer_left = True
                self.log.info("client disconnected code=%s", message.get("code"))
                return
            await self._on_frame(message)

    async def _receive(self) -> Message | None:
        """The next ASGI message, or None once a timeout has ended the session."""
        message = await self._reader.receive(
            lambda: self.state is SessionState.AWAITING_START, self._idle_since
        )
        if message is Silence.NOT_STARTED:
            limit = self._settings.start_timeout_s
            self._fatal(
                ErrorCode.NOT_STARTED, f"no session.start within {limit:g} s", CloseCode.POLICY
            )
            return None
        if message is Silence.IDLE:
            self._begin_close(CloseCode.NORMAL, "idle", ended=EndReason.IDLE_TIMEOUT)
            return None
        return message

    def _idle_since(self) -> float:
        """Idle means no client message and nothing playing; playing audio is not idling."""
        conversation = self._speech
        if self.busy:
            return time.monotonic()
        played = conversation.last_played if conversation is not None else 0.0
        return max(self._reader.last_activity, self._responses.last_played, played)

    async def _on_frame(self, message: Message) -> None:
        try:
            inputs = self._reader.decode(message)
        except FrameTooLarge as exc:
            self._fatal(exc.code, exc.message, CloseCode.TOO_BIG)
            return
        except ProtocolError as exc:
            self._protocol_error(exc)
        else:
            await self._act_on(inputs)
        self._wire.dispatched()

    async def _act_on(self, inputs: Sequence[WireInput]) -> None:
        for item in inputs:
            if self.state >= SessionState.CLOSING:
                return
            await self._dispatch(item)

    def _protocol_error(self, exc: ProtocolError) -> None:
        if self.state is SessionState.AWAITING_START:
            self._fatal(exc.code, exc.message, _START_CLOSE_CODES.get(exc.code, CloseCode.POLICY))
        else:
            self._error(exc.code, exc.message, exc.param)

    def _on_audio(self, data: bytes) -> None:
        if self.state is SessionState.AWAITING_START:
            self._fatal(
                ErrorCode.NOT_STARTED, "the first message must be session.start", CloseCode.POLICY
            )
        elif len(data) > self._settings.max_frame_bytes:
            self._error(
                ErrorCode.TOO_LARGE,
                f"audio frames are limited to {self._settings.max_frame_bytes} bytes",
            )
        elif self._speech is not None:
            try:
                self._speech.push(data)
            except UndecodableAudio as exc:
                self._error(ErrorCode.UNSUPPORTED_AUDIO, str(exc))
            except ProtocolError as exc:
                self._error(exc.code, exc.message, exc.param)
        else:  # audio-in models converse (above); this one reads text
            self._error(
                ErrorCode.UNSUPPORTED_INPUT, f"{self._engine.facts.name} takes text only, not audio"
            )

    async def _dispatch(self, event: WireInput) -> None:
        if isinstance(event, Reply):
            self._put(OutText(event.text))
        elif isinstance(event, AudioInput):
            self._on_audio(event.data)
        elif isinstance(event, SessionStart):
            started = await self._with_clip_voice(event)
            if started is not None:
                self._on_start(started)
        elif self.state is SessionState.AWAITING_START:
            self._fatal(
                ErrorCode.NOT_STARTED, "the first message must be session.start", CloseCode.POLICY
            )
        elif isinstance(event, SessionUpdate):
            self._on_update(event)
        elif (checked := self._with_checked_overrides(event)) is None:
            self._wire.refused(event)
        else:
            await self._dispatch_started(checked)

    async def _dispatch_started(self, event: WireInput) -> None:
        """A started session's input (its own response options already checked)."""
        if self._speech is not None and await self._speech_handles(event):
            pass
        elif isinstance(event, TextInput):
            self._responses.add_text(event)
        elif isinstance(event, ResponseCancel):
            await self._responses.cancel()
        elif isinstance(event, Playback):
            self._responses.report_playback(event.played_ms)
        elif isinstance(event, SessionEnd):
            if self._speech is not None:  # its response.done comes before session.ended
                await self._speech.end(self._settings.close_timeout_s)
            await self._responses.cancel()
            self._begin_close(CloseCode.NORMAL, "session ended", ended=EndReason.CLIENT_ENDED)
        elif isinstance(event, InputCommit | InputClear | Truncate):
            self._error(
                ErrorCode.UNSUPPORTED_INPUT,
                "audio turns (commit, clear, truncate) are for turn-based speech-to-speech models",
            )

    async def _speech_handles(self, event: WireInput) -> bool:
        """Offer a client event to the speech conversation; a refusal is a non-fatal error."""
        assert self._speech is not None
        try:
            return await self._speech.handle(event)
        except ProtocolError as exc:
            self._error(exc.code, exc.message, exc.param)
            return True

    # --- voices from clients: session.start's voice_clip -----------------------------------
    async def _with_clip_voice(self, event: SessionStart) -> SessionStart | None:
        """A session.start with `voice_clip`: the clip made into a voice of this key and the
        event with that voice; None when the clip is refused (a fatal error, as for any bad
        session.start)."""
        if event.voice_clip is None or self.state is not SessionState.AWAITING_START:
            return event
        made = await self._voices.with_clip(event)
        if isinstance(made, SessionStart):
            return made
        self._fatal(*made)
        return None

    # --- session.start / update -------------------------------------------------------------
    def _with_checked_overrides(self, event: WireInput) -> WireInput | None:
        """`event` with the options of the response it starts (a native text's model_options,
        OpenAI response.create's) checked as it arrives, as an update is, and in the form the
        model takes them; None, with the error sent, when refused (the input is then not acted
        on)."""
        overrides = overrides_of(event)
        if overrides is None:
            return event
        try:
            checked = check_overrides(self._responses.options, overrides, self._voices.facts())
        except ProtocolError as exc:
            self._error(exc.code, exc.message, exc.param)
            return None
        self._voices.touch(overrides.voice)
        return dataclasses.replace(event, overrides=checked)

    def _on_update(self, event: SessionUpdate) -> None:
        try:
            options = update_options(self._responses.options, event, self._voices.facts())
        except ProtocolError as exc:
            self._error(exc.code, exc.message, exc.param)
            return
        self._responses.options = options  # responses already playing keep theirs
        self._voices.touch(options.voice)
        if self._speech is not None:
            self._speech.reconfigure(options, event.input_audio, event.turn_detection)
        self._emit_event(SessionUpdated(options, event.echo))

    def _on_start(self, event: SessionStart) -> None:
        if self.state is not SessionState.AWAITING_START:
            self._error(ErrorCode.ALREADY_STARTED, "session.start may be sent once")
            return
        facts = self._voices.facts()
        try:
            self._responses.options = resolve_options(
                event, facts, self._settings.model, self._settings.input_transcription_model
            )
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        self._voices.touch(self._responses.options.voice)
        refusal = admission_refusal(self._engine, self._settings)
        if refusal is not None:
            self._refused(refusal)
            return
        self.state = SessionState.ACTIVE
        input_audio = input_audio_of(event, facts)
        options = self._responses.options
        if self._speech is not None:
            detection = event.turn_detection or TurnDetection()
            self._speech.start(options, input_audio or AudioSpec(), detection)
        self._emit_event(
            started_event(
                self.session_id,
                facts,
                options,
                input_audio,
                self._settings,
                speed=options.speed if event.speed is not None else None,
            )
        )
        out = options.output
        self.log.info(
            "session started output=%s/%d/%dms voice=%s",
            out.format.value,
            out.sample_rate,
            out.frame_ms,
            options.voice,
        )
