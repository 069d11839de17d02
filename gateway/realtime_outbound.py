"""The native session's events → `/v1/realtime` server events (the JSON text of each).

`RealtimeOutbound.encode` takes one WireEvent the session sends (gateway.wire, gateway.protocol)
and returns the Realtime events that say it, built by gateway.realtime_events; a response's
audio goes out through `audio_delta`, one base64 delta event per frame. It keeps what those
events refer to: the session resource, the response being spoken, its transcript and its
function calls (gateway.realtime_calls). What the client sends is gateway.realtime_inbound's.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, replace

from engine.api import SamplingParams
from gateway.protocol import (
    ErrorCode,
    ErrorEvent,
    InputTranscript,
    ResponseDone,
    ResponseStarted,
    ResponseStatus,
    SessionEnded,
    SessionStarted,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
)
from gateway.realtime_calls import ResponseCalls, tool_resource
from gateway.realtime_events import (
    OutputItem,
    ResponseOutcome,
    ResponseView,
    SessionView,
    encode_audio_delta,
    encode_error,
    encode_input_event,
    encode_input_transcript,
    encode_input_transcript_failed,
    encode_item_deleted,
    encode_response_done,
    encode_response_started,
    encode_session,
    encode_speech_event,
    encode_transcript_delta,
    encode_user_audio_item,
)
from gateway.realtime_protocol import UNSET
from gateway.realtime_state import FORMAT_OF, SERVER_VAD, RealtimeState, ResponseEcho
from gateway.reply import SpeechOptions
from gateway.wire import (
    InputCleared,
    InputCommitted,
    SessionUpdated,
    Truncated,
    TurnForgotten,
    WireEvent,
)

_OUTCOMES = {
    ResponseStatus.COMPLETED: ("completed", None),
    ResponseStatus.CANCELLED: ("cancelled", "client_cancelled"),
    ResponseStatus.LENGTH: ("incomplete", "max_output_tokens"),
    ResponseStatus.FAILED: ("failed", None),
}
# Errors that are the server's doing; every other code is the client's request being refused.
_SERVER_ERRORS = {ErrorCode.INTERNAL, ErrorCode.MODEL_ERROR, ErrorCode.OVERLOADED}


class RealtimeOutbound:
    def __init__(self, state: RealtimeState) -> None:
        self._state = state
        self._facts = state.facts
        self._tools = state.tools
        self._view: SessionView | None = None
        self._current: OutputItem | None = None
        self._transcript: list[str] = []
        self._input_item: str | None = None  # the user audio item being spoken
        self._calls: ResponseCalls | None = None  # the current response's, with tools
        # The current response's `metadata` (its response.create's; None: none).
        self._response_view = ResponseView()  # the current response's options, as shown
        self._spoken_items: tuple[str, ...] = ()  # the text messages it speaks
        # The current response answers a committed audio turn (RealtimeState.audio_turn_answered).
        self._answering_turn = False

    def encode(self, event: WireEvent) -> list[str]:
        dialect = self._state.dialect
        if isinstance(event, SessionStarted):
            self._view = self._started_view(event)
            self._state.output_format = self._view.output_format
            return [encode_session("session.created", dialect, self._view)]
        if isinstance(event, SessionUpdated):
            self._view = self._updated_view(event)
            self._state.output_format = self._view.output_format
            return [encode_session("session.updated", dialect, self._view)]
        if isinstance(event, ResponseStarted):
            return self._response_started(event)
        if isinstance(event, TranscriptDelta) and self._current is not None:
            if self._calls is not None:
                events = self._calls.feed(event.text)
                self._state.last_item_id = self._calls.last_item_id
                return events
            self._transcript.append(event.text)
            return [encode_transcript_delta(dialect, self._current, event.text)]
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
            previous, self._state.last_item_id = self._state.last_item_id, item
            self._input_item = None
            self._state.turn_items.add(item, event.turn_id)
            # Whether the server answers it, or a response.create will (create_response false).
            self._state.audio_turn_answered = event.answered
            return [
                encode_input_event("input_audio_buffer.committed", item, previous),
                encode_user_audio_item(item, previous),
            ]
        if isinstance(event, InputCleared):
            self._input_item = None
            return [encode_input_event("input_audio_buffer.cleared")]
        if isinstance(event, Truncated):
            item, self._state.truncating = self._state.truncating or "", None
            return [
                encode_input_event(
                    "conversation.item.truncated", item, audio_end_ms=event.audio_end_ms
                )
            ]
        if isinstance(event, ErrorEvent):
            error_type = "server_error" if event.code in _SERVER_ERRORS else "invalid_request_error"
            state = self._state
            return [
                encode_error(
                    error_type,
                    event.code.value,
                    event.message,
                    event.event_id or state.event_id,
                    event.param,
                )
            ]
        if isinstance(event, TurnForgotten):
            return self._turn_forgotten(event.turn_id)
        if isinstance(event, InputTranscript):
            return self._transcribed(event)
        if isinstance(event, SessionEnded):
            return []  # the Realtime API has no such event: the close frame says it
        return []

    def audio_delta(self, data: bytes) -> str:
        if self._current is None:  # audio only flows inside a response
            raise RuntimeError("audio outside a response")
        return encode_audio_delta(self._state.dialect, self._current, data)

    def _response_started(self, event: ResponseStarted) -> list[str]:
        dialect = self._state.dialect
        item_id = f"item_{uuid.uuid4().hex[:20]}"
        self._current = OutputItem(event.response_id, item_id)
        self._answering_turn = self._state.audio_turn_answered
        self._transcript = []
        previous, self._state.last_item_id = self._state.last_item_id, item_id
        self._state.answering.add(item_id)
        if self._facts.accepts_turns:  # the reply joins the conversation as the model's turn
            self._state.turn_items.add(item_id, event.response_id)
        parser = self._tools.parser()
        self._calls = None
        if parser is not None:
            self._calls = ResponseCalls(
                dialect, self._current, parser, self._transcript, item_id, self._tools.opened
            )
        # What gateway.realtime_inbound put in the response's overrides.
        echo = event.echo if isinstance(event.echo, ResponseEcho) else ResponseEcho()
        self._spoken_items = echo.items
        self._response_view = self._response_view_of(event.options, echo.metadata)
        return encode_response_started(dialect, self._current, previous, self._response_view)

    def _response_view_of(self, options: object, metadata: dict | None) -> ResponseView:
        """The options the response runs with, as its ResponseStarted says (the session's
        with its response.create's over them); a reply without options of its own (a
        full-duplex model's) shows the session's, as session.created / .updated did."""
        if isinstance(options, SpeechOptions):
            sampling = options.sampling
            voice, temperature, max_tokens = (
                options.voice,
                sampling.temperature,
                sampling.max_tokens,
            )
        elif self._view is not None:
            session = self._view
            voice, temperature, max_tokens = (
                session.voice,
                session.temperature,
                session.max_output_tokens,
            )
        else:
            voice = temperature = max_tokens = None
        return ResponseView(voice, self._state.output_format, temperature, max_tokens, metadata)

    def _response_done(self, event: ResponseDone) -> list[str]:
        events, items = [], []
        if self._calls is not None:
            events, items = self._calls.finish(), self._calls.items
            self._state.last_item_id = self._calls.last_item_id
            for call in items:  # the calls are part of the reply's turn
                self._state.turn_items.add(call["id"], event.response_id)
        self._calls = None
        status, reason = _OUTCOMES[event.status]
        transcript = "".join(self._transcript)  # "" where the model wrote none
        error = "generation failed" if event.status is ResponseStatus.FAILED else None
        outcome = ResponseOutcome(status, reason, error, transcript)
        out, self._current = self._current, None
        assert out is not None
        if self._answering_turn:  # the answer is done: a response.create now asks anew
            self._state.audio_turn_answered = self._answering_turn = False
        self._state.last_reply_item = out.item_id
        self._state.answering.difference_update((out.item_id, *self._spoken_items))
        done = encode_response_done(self._state.dialect, out, outcome, items, self._response_view)
        return events + done

    def _transcribed(self, event: InputTranscript) -> list[str]:
        """A spoken turn's transcript, for its user audio item (none once that is deleted)."""
        out = []
        for item_id in self._state.turn_items.items_of(event.turn_id):
            if event.error is not None:
                out.append(encode_input_transcript_failed(item_id, event.error))
            else:
                self._state.items.transcribed(item_id, event.text)
                out.append(encode_input_transcript(item_id, event.text))
        return out

    def _turn_forgotten(self, turn_id: str) -> list[str]:
        """The conversation took a turn out (a conversation.item.delete): each of its items is
        deleted, in order: the one asked for and any that were one turn with it."""
        state = self._state
        deleted = [item for item in state.turn_items.take(turn_id) if state.items.get(item)]
        for item_id in deleted:  # (an item not remembered: deleted already, or too old)
            state.items.forget(item_id)
        if state.last_reply_item in deleted:
            state.last_reply_item = None
        if state.last_item_id in deleted:
            state.last_item_id = state.items.newest  # the next item follows the newest left
        return [encode_item_deleted(item_id) for item_id in deleted]

    def _started_view(self, event: SessionStarted) -> SessionView:
        sampling = SamplingParams(**self._facts.sampling_defaults)
        return SessionView(
            session_id=event.session_id,
            model=event.model,
            voice=self._facts.default_voice,
            output_format=FORMAT_OF[event.output_audio.format],
            input_format=FORMAT_OF[event.input_audio.format] if event.input_audio else None,
            turn_detection=dict(SERVER_VAD) if event.input_audio else None,
            instructions="",
            temperature=sampling.temperature,
            max_output_tokens=sampling.max_tokens,
        )

    def _updated_view(self, event: SessionUpdated) -> SessionView:
        # The echo gateway.realtime_inbound packed into the SessionUpdate.
        turn, instructions, input_format, tools, choice = (
            event.echo if isinstance(event.echo, tuple) else (UNSET, None, None, None, None)
        )
        self._tools.accept(tools, choice)
        options = event.options
        view = self._view
        if view is None:  # the session acts on updates only once it has started
            raise RuntimeError("session.updated before session.created")
        return replace(
            view,
            voice=options.voice,
            output_format=FORMAT_OF[options.output.format],
            input_format=view.input_format if input_format is None else input_format,
            turn_detection=view.turn_detection if turn is UNSET else turn,
            instructions=view.instructions if instructions is None else instructions,
            temperature=options.sampling.temperature,
            max_output_tokens=options.sampling.max_tokens,
            speed=options.speed,
            tools=tuple(tool_resource(t) for t in self._tools.tools),
            tool_choice=self._tools.choice,
            input_transcription=(
                None if options.input_transcription is None else asdict(options.input_transcription)
            ),
        )
