"""`/v1/realtime`: the OpenAI Realtime API as an adapter onto the native session layer.

A `RealtimeWire` is the per-connection translator a `Session` is handed (gateway.wire):

    on open                  → session.start (pcm16 24 kHz out)  → `session.created`
    session.update           → SessionUpdate (voice, format, sampling) → `session.updated`
    conversation.item.create → the text is kept (user and assistant messages are what a
                               text-to-speech model speaks)       → `conversation.item.created`
    response.create          → `text` (final) with the kept text  → response.created, …
    response.cancel          → `response.cancel`                  → response.done cancelled
    input_audio_buffer.append → audio (turn-based speech-to-speech models; server VAD →
                               input_audio_buffer.speech_started / speech_stopped / committed)
    input_audio_buffer.commit / .clear → `input.commit` / InputClear
    conversation.item.truncate → Truncate: the reply is kept only as far as it was heard
    session.tools / tool_choice → SessionUpdate.tools (models with tool calls): the reply's
                               transcript is parsed as it streams (models/tool_calls.py), and
                               each call becomes a `function_call` item (output_item.added,
                               function_call_arguments.delta / .done, output_item.done)
    conversation.item.create function_call_output → kept until response.create, which sends
                               ToolOutputs: the model answers the results
    conversation.item.create function_call → ToolCall: the client's call joins the history
    audio input events       → `error` (needs a speech-to-speech model) for TTS models

Everything else — limits, pacing, backpressure, barge-in, metrics, engine requests — is the
session's, exactly as on `/v1/stream`. Audio leaves as base64 `response.audio.delta` (beta) or
`response.output_audio.delta` (GA) events, one per 20 ms frame.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace

from engine.api import ModelFacts, SamplingParams
from gateway.pacing import OutAudio, OutItem, OutText
from gateway.protocol import (
    AudioFormat,
    AudioInput,
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    InputCommit,
    ProtocolError,
    ResponseCancel,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
    SessionEnded,
    SessionStart,
    SessionStarted,
    SpeechStarted,
    SpeechStopped,
    TextInput,
    TranscriptDelta,
    TurnDetection,
    TurnDetectionType,
    decode_sampling,
)
from gateway.realtime_calls import ResponseCalls, SessionTools, tool_resource
from gateway.realtime_events import (
    OutputItem,
    ResponseOutcome,
    SessionView,
    encode_audio_delta,
    encode_error,
    encode_input_event,
    encode_item_created,
    encode_response_done,
    encode_response_started,
    encode_session,
    encode_speech_event,
    encode_transcript_delta,
    encode_user_audio_item,
)
from gateway.realtime_protocol import (
    BETA_HEADER_VALUE,
    BETA_SUBPROTOCOL,
    SUBPROTOCOL,
    UNSET,
    AudioInputEvent,
    Dialect,
    ItemCreateEvent,
    RealtimeFormat,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionUpdateEvent,
    TruncateEvent,
    decode_client_event,
    event_id_of,
)
from gateway.realtime_tools import FunctionCallEvent, FunctionOutputEvent
from gateway.wire import (
    InputClear,
    InputCleared,
    InputCommitted,
    Reply,
    SessionUpdate,
    SessionUpdated,
    ToolCall,
    ToolOutputs,
    Truncate,
    Truncated,
    Wire,
    WireEvent,
    WireInput,
)

_FRAME_MS = 20
SPECS: Mapping[RealtimeFormat, AudioSpec] = {
    RealtimeFormat.PCM16: AudioSpec(AudioFormat.PCM16, 24000, _FRAME_MS),
    RealtimeFormat.G711_ULAW: AudioSpec(AudioFormat.MULAW, 8000, _FRAME_MS),
    RealtimeFormat.G711_ALAW: AudioSpec(AudioFormat.ALAW, 8000, _FRAME_MS),
}
_FORMAT_OF = {spec.format: fmt for fmt, spec in SPECS.items()}

_OUTCOMES = {
    ResponseStatus.COMPLETED: ("completed", None),
    ResponseStatus.CANCELLED: ("cancelled", "client_cancelled"),
    ResponseStatus.LENGTH: ("incomplete", "max_output_tokens"),
    ResponseStatus.FAILED: ("failed", None),
}
# Errors that are the server's doing; every other code is the client's request being refused.
_SERVER_ERRORS = {ErrorCode.INTERNAL, ErrorCode.MODEL_ERROR, ErrorCode.OVERLOADED}


def dialect_of(headers: Mapping[str, str], subprotocols: Sequence[str]) -> Dialect:
    """Beta clients say so (`OpenAI-Beta: realtime=v1`, or its subprotocol from browsers)."""
    beta = BETA_HEADER_VALUE in headers.get("openai-beta", "") or BETA_SUBPROTOCOL in subprotocols
    return Dialect.BETA if beta else Dialect.GA


SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}


def native_turn_detection(turn: object) -> TurnDetection | None:
    """A Realtime `turn_detection` (an object, or null: the client commits turns) → the native
    one. `server_vad` and `semantic_vad` both mean the server's VAD; ProtocolError else."""
    if turn is UNSET:
        return None
    if turn is None:
        return TurnDetection(TurnDetectionType.NONE)
    assert isinstance(turn, dict)
    if turn.get("type", "server_vad") not in ("server_vad", "semantic_vad"):
        raise ProtocolError(
            ErrorCode.BAD_FIELD, "`turn_detection.type` must be server_vad or semantic_vad"
        )
    silence = turn.get("silence_duration_ms", 500)
    if not isinstance(silence, int) or isinstance(silence, bool) or not 0 < silence <= 10_000:
        raise ProtocolError(ErrorCode.BAD_FIELD, "`silence_duration_ms` must be in 1..10000")
    return TurnDetection(TurnDetectionType.VAD, silence)


def _audio_input_refusal(kind: str, facts: ModelFacts) -> ProtocolError:
    return ProtocolError(
        ErrorCode.UNSUPPORTED_INPUT,
        f"{kind}: audio input needs a speech-to-speech model, and {facts.name} is text-to-speech; "
        "send text with conversation.item.create, then response.create",
    )


class RealtimeWire(Wire):
    def __init__(
        self,
        dialect: Dialect,
        facts: ModelFacts,
        model: str | None,
        offered_subprotocols: Sequence[str] = (),
        max_pending_chars: int = 32768,
    ) -> None:
        self.dialect = dialect
        self.subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered_subprotocols else None
        self._facts = facts
        self._model = model  # the client's `?model=`; the session refuses another model's name
        self._view: SessionView | None = None
        self._pending_text: list[str] = []  # text items since the last response.create
        self._max_pending_chars = max_pending_chars  # a response's text limit, bounding memory
        self._last_item_id: str | None = None
        self._current: OutputItem | None = None
        self._transcript: list[str] = []
        self._event_id: str | None = None  # the client event being handled, for its errors
        self._input_item: str | None = None  # the user audio item being spoken
        self._last_reply_item: str | None = None  # the last assistant item, for truncate
        self._truncating: str | None = None
        # An audio turn was committed and is being answered: a response.create that follows
        # (what clients send after input_audio_buffer.commit) asks for that answer.
        self._audio_turn_answered = False
        # Function calling (models whose facts name a tool_call_syntax).
        self._tools = SessionTools(facts, max_pending_chars)
        self._calls: ResponseCalls | None = None  # the current response's, with tools

    # --- client → session ------------------------------------------------------------------
    def opening(self) -> Sequence[WireInput]:
        # A Realtime session starts with the connection; `session.created` answers it.
        input_audio = SPECS[RealtimeFormat.PCM16] if self._facts.accepts_audio else None
        start = SessionStart(
            model=self._model, output_audio=SPECS[RealtimeFormat.PCM16], input_audio=input_audio
        )
        return (start,)

    def decode_text(self, text: str) -> Sequence[WireInput]:
        try:
            event = decode_client_event(text)
        except ProtocolError:
            self._event_id = event_id_of(text)
            raise
        self._event_id = event.event_id
        if isinstance(event, SessionUpdateEvent):
            return (self._session_update(event),)
        if isinstance(event, ItemCreateEvent):
            return (self._item_create(event),)
        if isinstance(event, FunctionOutputEvent):
            return (self._function_output(event),)
        if isinstance(event, FunctionCallEvent):
            return self._function_call(event)
        if isinstance(event, ResponseCreateEvent):
            if self._tools.has_outputs:
                return (ToolOutputs(self._tools.take_outputs()),)
            if not self._pending_text and self._audio_turn_answered:
                self._audio_turn_answered = False
                return ()  # the committed audio turn is already being answered
            if not self._pending_text:
                raise ProtocolError(
                    ErrorCode.BAD_FIELD,
                    "nothing to speak: add a user or assistant text message with "
                    "conversation.item.create before response.create",
                )
            text_to_speak = " ".join(self._pending_text)
            self._pending_text.clear()
            return (TextInput(text_to_speak, final=True),)
        if isinstance(event, ResponseCancelEvent):
            return (ResponseCancel(),)
        if isinstance(event, TruncateEvent):
            return self._truncate(event)
        return self._audio_input(event)

    def decode_binary(self, data: bytes) -> Sequence[WireInput]:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            "the Realtime API carries audio in JSON events (input_audio_buffer.append), "
            "not in binary frames",
        )

    def dispatched(self) -> None:
        self._event_id = None

    def _session_update(self, event: SessionUpdateEvent) -> SessionUpdate:
        sampling = decode_sampling(event.sampling)  # the Voxgate extension, type-checked
        if event.temperature is not None:
            sampling["temperature"] = event.temperature
        if event.max_output_tokens is not None:
            sampling["max_tokens"] = event.max_output_tokens
        if event.instructions and not self._facts.system_prompt:
            # Only models with a system prompt (Step-Audio 2, GLM-4-Voice) are steered by
            # them; echoing them back would tell the client they steer the answers.
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`instructions` are not applied: {self._facts.name} is not given a system "
                "prompt by this server; leave them out (or send an empty string)",
            )
        # The system prompt of later turns ("" : the model's own); None: unchanged.
        instructions = event.instructions if self._facts.system_prompt else None
        output = SPECS[event.output_format] if event.output_format is not None else None
        input_audio = SPECS[event.input_format] if event.input_format is not None else None
        if input_audio is not None and not self._facts.accepts_audio:
            raise _audio_input_refusal("input_audio_format", self._facts)
        if event.turn_detection not in (UNSET, None) and not self._facts.accepts_audio:
            raise _audio_input_refusal("turn_detection", self._facts)
        detection = native_turn_detection(event.turn_detection)
        tools, choice = self._tools.update(event)
        # What the session does not own comes back in SessionUpdated once the update is taken.
        echo = (event.turn_detection, event.instructions, event.input_format, tools, choice)
        return SessionUpdate(
            event.voice,
            output,
            sampling,
            echo,
            input_audio,
            detection,
            instructions,
            speed=event.speed,
            tools=None if tools is None else self._tools.prompt_tools(tools, choice),
        )

    def _function_output(self, event: FunctionOutputEvent) -> Reply:
        if self._pending_text:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "a response answers either function call outputs or new messages: send "
                "response.create for the messages first",
            )
        item_id, created = self._tools.add_output(event, self._last_item_id)
        self._last_item_id = item_id
        return Reply(created)

    def _function_call(self, event: FunctionCallEvent) -> Sequence[WireInput]:
        if self._pending_text:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "messages are waiting for response.create: send it before adding a "
                "function_call item",
            )
        item_id, created = self._tools.add_call(event, self._last_item_id)
        self._last_item_id = item_id
        return (Reply(created), ToolCall(event.name, event.arguments))

    def _item_create(self, event: ItemCreateEvent) -> Reply:
        item_id = event.item_id or f"item_{uuid.uuid4().hex[:20]}"
        if event.role in ("user", "assistant") and self._tools.has_outputs:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "function call outputs are waiting for response.create: send it before "
                "adding messages",
            )
        if event.role in ("user", "assistant"):
            pending = sum(len(t) for t in self._pending_text) + len(event.text)
            if pending > self._max_pending_chars:
                raise ProtocolError(
                    ErrorCode.TOO_LARGE,
                    f"a response is limited to {self._max_pending_chars} characters of text; "
                    "send response.create before adding more",
                )
            self._pending_text.append(event.text)
        # A system message has nothing to speak; it is acknowledged and otherwise ignored.
        reply = encode_item_created(
            self.dialect, item_id, event.role, event.text, self._last_item_id
        )
        self._last_item_id = item_id
        return Reply(reply)

    def _audio_input(self, event: AudioInputEvent) -> Sequence[WireInput]:
        if not self._facts.accepts_audio:
            raise _audio_input_refusal(event.type, self._facts)
        if event.type == "input_audio_buffer.commit":
            return (InputCommit(),)
        if event.type == "input_audio_buffer.append":
            return (AudioInput(event.audio),)
        return (InputClear(),)

    def _truncate(self, event: TruncateEvent) -> Sequence[WireInput]:
        if not self._facts.accepts_audio:
            raise _audio_input_refusal("conversation.item.truncate", self._facts)
        event.check()
        assert isinstance(event.audio_end_ms, int)
        if event.item_id != self._last_reply_item or event.content_index != 0:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "only the audio (content_index 0) of the last finished assistant item can be "
                f"truncated; that is {self._last_reply_item!r}",
            )
        self._truncating = event.item_id
        return (Truncate(event.audio_end_ms),)

    # --- session → client ------------------------------------------------------------------
    def encode_event(self, event: WireEvent) -> Sequence[OutItem]:
        return [OutText(text) for text in self._encode(event)]

    def _encode(self, event: WireEvent) -> list[str]:
        if isinstance(event, SessionStarted):
            self._view = self._started_view(event)
            return [encode_session("session.created", self.dialect, self._view)]
        if isinstance(event, SessionUpdated):
            return [encode_session("session.updated", self.dialect, self._updated_view(event))]
        if isinstance(event, ResponseStarted):
            item_id = f"item_{uuid.uuid4().hex[:20]}"
            self._current = OutputItem(event.response_id, item_id)
            self._transcript = []
            previous, self._last_item_id = self._last_item_id, item_id
            parser = self._tools.parser()
            self._calls = None
            if parser is not None:
                self._calls = ResponseCalls(
                    self.dialect,
                    self._current,
                    parser,
                    self._transcript,
                    item_id,
                    self._tools.opened,
                )
            return encode_response_started(self.dialect, self._current, previous)
        if isinstance(event, TranscriptDelta) and self._current is not None:
            if self._calls is not None:
                events = self._calls.feed(event.text)
                self._last_item_id = self._calls.last_item_id
                return events
            self._transcript.append(event.text)
            return [encode_transcript_delta(self.dialect, self._current, event.text)]
        if isinstance(event, ResponseDone) and self._current is not None:
            return self._response_done(event)
        if isinstance(event, SpeechStarted | SpeechStopped):
            kind = "started" if isinstance(event, SpeechStarted) else "stopped"
            if self._input_item is None:
                self._input_item = f"item_{uuid.uuid4().hex[:20]}"
            item = self._input_item
            return [encode_speech_event(f"input_audio_buffer.speech_{kind}", event.audio_ms, item)]
        if isinstance(event, InputCommitted):
            item = self._input_item or f"item_{uuid.uuid4().hex[:20]}"
            previous, self._last_item_id, self._input_item = self._last_item_id, item, None
            self._audio_turn_answered = True
            return [
                encode_input_event("input_audio_buffer.committed", item, previous),
                encode_user_audio_item(item, previous),
            ]
        if isinstance(event, InputCleared):
            self._input_item = None
            return [encode_input_event("input_audio_buffer.cleared")]
        if isinstance(event, Truncated):
            item, self._truncating = self._truncating or "", None
            return [
                encode_input_event(
                    "conversation.item.truncated", item, audio_end_ms=event.audio_end_ms
                )
            ]
        if isinstance(event, ErrorEvent):
            error_type = "server_error" if event.code in _SERVER_ERRORS else "invalid_request_error"
            return [encode_error(error_type, event.code.value, event.message, self._event_id)]
        if isinstance(event, SessionEnded):
            return []  # the Realtime API has no such event: the close frame says it
        return []

    def encode_audio(self, data: bytes, duration_ms: int) -> Sequence[OutItem]:
        if self._current is None:  # audio only flows inside a response
            raise RuntimeError("audio outside a response")
        return (OutAudio(encode_audio_delta(self.dialect, self._current, data), duration_ms),)

    def _response_done(self, event: ResponseDone) -> list[str]:
        events, items = [], []
        if self._calls is not None:
            events, items = self._calls.finish(), self._calls.items
            self._last_item_id = self._calls.last_item_id
        self._calls = None
        status, reason = _OUTCOMES[event.status]
        transcript = "".join(self._transcript) if self._transcript else None
        error = "generation failed" if event.status is ResponseStatus.FAILED else None
        outcome = ResponseOutcome(status, reason, error, transcript)
        out, self._current = self._current, None
        assert out is not None
        self._last_reply_item = out.item_id
        return events + encode_response_done(self.dialect, out, outcome, items)

    def _started_view(self, event: SessionStarted) -> SessionView:
        sampling = SamplingParams(**self._facts.sampling_defaults)
        return SessionView(
            session_id=event.session_id,
            model=event.model,
            voice=self._facts.default_voice,
            output_format=_FORMAT_OF[event.output_audio.format],
            input_format=_FORMAT_OF[event.input_audio.format] if event.input_audio else None,
            turn_detection=dict(SERVER_VAD) if event.input_audio else None,
            instructions="",
            temperature=sampling.temperature,
            max_output_tokens=sampling.max_tokens,
        )

    def _updated_view(self, event: SessionUpdated) -> SessionView:
        turn, instructions, input_format, tools, choice = (
            event.echo if isinstance(event.echo, tuple) else (UNSET, None, None, None, None)
        )
        self._tools.accept(tools, choice)
        options = event.options
        view = self._view
        if view is None:  # the session acts on updates only once it has started
            raise RuntimeError("session.updated before session.created")
        self._view = replace(
            view,
            voice=options.voice,
            output_format=_FORMAT_OF[options.output.format],
            input_format=view.input_format if input_format is None else input_format,
            turn_detection=view.turn_detection if turn is UNSET else turn,
            instructions=view.instructions if instructions is None else instructions,
            temperature=options.sampling.temperature,
            max_output_tokens=options.sampling.max_tokens,
            speed=options.speed,
            tools=tuple(tool_resource(t) for t in self._tools.tools),
            tool_choice=self._tools.choice,
        )
        return self._view
