"""`/v1/realtime`: the OpenAI Realtime API as an adapter onto the native session layer.

A `RealtimeWire` is the per-connection translator a `Session` is handed (gateway.wire):

    on open                  → session.start (pcm16 24 kHz out)  → `session.created`
    session.update           → SessionUpdate (voice, format, sampling) → `session.updated`
    conversation.item.create → the text is kept (user and assistant messages are what a
                               text-to-speech model speaks; a turn-based model takes an
                               assistant message as its own turn: AssistantMessage)
                                                                  → `conversation.item.created`
    response.create          → `text` (final) with the kept text  → response.created, …
                               its `response` options ride along (ResponseOverrides) for
                               that response only; its `metadata` is echoed in it
    response.cancel          → `response.cancel`                  → response.done cancelled
    input_audio_buffer.append → audio (turn-based speech-to-speech models; server VAD →
                               input_audio_buffer.speech_started / speech_stopped / committed)
    input_audio_buffer.commit / .clear → `input.commit` / InputClear; with turn_detection
                               null the committed turn is held (no response starts)
    response.create after turns committed with turn_detection null or create_response false
                             → AnswerTurns: the held turns are answered
    conversation.item.truncate → Truncate: the reply is kept only as far as it was heard
    conversation.item.retrieve → `conversation.item.retrieved`: the item as last shown
                               (RealtimeState.items remembers the newest MAX_ITEMS)
    conversation.item.delete → `conversation.item.deleted`: a text message waiting for
                               response.create is dropped, a spoken one forgotten; in a
                               turn-based model's history → ForgetTurn (its turn erased;
                               TurnForgotten → deleted for each of the turn's items);
                               refused on full-duplex models
    session.tools / tool_choice → SessionUpdate.tools (models with tool calls): the reply's
                               transcript is parsed as it streams (models/tool_calls.py), and
                               each call becomes a `function_call` item (output_item.added,
                               function_call_arguments.delta / .done, output_item.done)
    conversation.item.create function_call_output → kept until response.create, which sends
                               ToolOutputs: the model answers the results
    conversation.item.create function_call → ToolCall: the client's call joins the history
    audio input events       → `error` (needs a speech-to-speech model) for TTS models
    session.update input_audio_transcription → SessionUpdate.input_transcription: each
                               committed turn's InputTranscript →
                               conversation.item.input_audio_transcription.completed

Everything else — limits, pacing, backpressure, barge-in, metrics, engine requests — is the
session's, exactly as on `/v1/stream`. Audio leaves as base64 `response.audio.delta` (beta) or
`response.output_audio.delta` (GA) events, one per 20 ms frame.

Where each part lives: client events are handled in gateway.realtime_inbound (RealtimeInbound,
a method per event type), the session's events become Realtime events in
gateway.realtime_outbound (RealtimeOutbound), and what both keep about the conversation is
gateway.realtime_state's. The events' shapes, as data: gateway.realtime_protocol (client) and
gateway.realtime_events (server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engine.api import ModelFacts
from gateway.config import GatewaySettings
from gateway.realtime_calls import SessionTools
from gateway.realtime_inbound import RealtimeInbound
from gateway.realtime_outbound import RealtimeOutbound
from gateway.realtime_protocol import BETA_HEADER_VALUE, BETA_SUBPROTOCOL, SUBPROTOCOL, Dialect
from gateway.realtime_state import RealtimeState
from gateway.socket_items import OutAudio, OutItem, OutText
from gateway.wire import Reply, Wire, WireEvent, WireInput


def dialect_of(headers: Mapping[str, str], subprotocols: Sequence[str]) -> Dialect:
    """Beta clients say so (`OpenAI-Beta: realtime=v1`, or its subprotocol from browsers)."""
    beta = BETA_HEADER_VALUE in headers.get("openai-beta", "") or BETA_SUBPROTOCOL in subprotocols
    return Dialect.BETA if beta else Dialect.GA


# The gateway's default limits, for a wire built without the served settings.
_DEFAULTS = GatewaySettings()


class RealtimeWire(Wire):
    def __init__(
        self,
        dialect: Dialect,
        facts: ModelFacts,
        model: str | None,
        offered_subprotocols: Sequence[str] = (),
        max_pending_chars: int = _DEFAULTS.max_response_text_chars,
        max_frame_bytes: int = _DEFAULTS.max_frame_bytes,
        max_text_chars: int = _DEFAULTS.max_text_chars,
        transcription: str | None = None,
    ) -> None:
        """`transcription`: the server's transcription model (None: transcripts are not
        offered, and a session asking for them is refused)."""
        self.dialect = dialect
        self.subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered_subprotocols else None
        self._state = RealtimeState(dialect, facts, SessionTools(facts, max_pending_chars))
        self._inbound = RealtimeInbound(
            self._state, model, max_pending_chars, max_frame_bytes, max_text_chars, transcription
        )
        self._outbound = RealtimeOutbound(self._state)

    # --- client → session ------------------------------------------------------------------
    def opening(self) -> Sequence[WireInput]:
        return self._inbound.opening()

    def decode_text(self, text: str) -> Sequence[WireInput]:
        inputs = self._inbound.decode(text)
        for event in inputs:
            if isinstance(event, Reply):
                self._state.items.note(event.text)
        return inputs

    def decode_binary(self, data: bytes) -> Sequence[WireInput]:
        return self._inbound.decode_binary(data)

    def dispatched(self) -> None:
        self._state.event_id = None

    def refused(self, event: WireInput) -> None:
        self._inbound.refused(event)

    # --- session → client ------------------------------------------------------------------
    def encode_event(self, event: WireEvent) -> Sequence[OutItem]:
        texts = self._outbound.encode(event)
        for text in texts:
            self._state.items.note(text)
        return [OutText(text) for text in texts]

    def encode_audio(self, data: bytes, duration_ms: int) -> Sequence[OutItem]:
        return (OutAudio(self._outbound.audio_delta(data), duration_ms),)
