"""What a session speaks on its socket: the seam between the one session layer and the
protocols that reach it (the native protocol of docs/protocol.md, the OpenAI Realtime API, …).

A `Session` (gateway.session) runs on native events only. A `Wire` translates, per connection:

    client frame ──decode_text / decode_binary──▶ native ClientEvents (+ direct Replies)
    native ServerEvent / audio frame ──encode_event / encode_audio──▶ socket items

so a compatibility endpoint is an adapter with its own small state (ids, which API dialect),
never a second copy of the session's logic, limits, pacing or metrics.

A few events exist only on this seam, for protocols that can do what the native v1 protocol
cannot (its decoder never produces them, its encoder drops them): `SessionUpdate` in and
`SessionUpdated` out (options mid-session), `InputClear` / `Truncate` in and
`InputCommitted` / `InputCleared` / `Truncated` out (turn-based audio input), `AnswerTurns` in
(answer user turns committed without a response), `ToolOutputs` and `ToolCall` in (a tool's
results, a client's call: models with tool calls), `AssistantMessage` in (the model's words,
put in by the client), `ForgetTurn` in and `TurnForgotten` out (a turn taken out of the
conversation). The input that starts a response
(`TextInput`, `AnswerTurns`, `ToolOutputs`) may carry that response's own options
(gateway.response_overrides), whose `echo` comes back in its `ResponseStarted`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from gateway.input_transcription import InputTranscription
from gateway.protocol import (
    AudioInput,
    AudioSpec,
    ClientEvent,
    ServerEvent,
    TextInput,
    TurnDetection,
    decode_text_frame,
    encode_event,
)
from gateway.reply import SpeechOptions
from gateway.response_overrides import ResponseOverrides
from gateway.socket_items import OutAudio, OutItem, OutText
from models.tool_calls import FunctionTool


@dataclass(frozen=True)
class SessionUpdate:
    """Change the options of the responses that start from now on. None: keep as is.
    `echo` is the adapter's own data, handed back untouched in `SessionUpdated`."""

    voice: str | None = None
    output_audio: AudioSpec | None = None
    sampling: Mapping[str, float | int | None] = field(default_factory=dict)
    echo: object = None
    # Turn-based speech-to-speech sessions: the user's audio format and turn detection.
    input_audio: AudioSpec | None = None
    turn_detection: TurnDetection | None = None
    # The system prompt of later user turns (models with ModelFacts.system_prompt).
    instructions: str | None = None
    speed: float | None = None  # OpenAI's `speed`, checked (gateway/time_stretch.check_speed)
    # The tools written into the prompt of later replies (models with
    # ModelFacts.tool_call_syntax); () for none, None: unchanged.
    tools: tuple[FunctionTool, ...] | None = None
    # Transcripts of later spoken turns (turn-based models; the server must offer them):
    # NO_TRANSCRIPTION for none, None: unchanged.
    input_transcription: InputTranscription | None = None
    # Where the client's event set each option, by the name a refusal blames it with
    # (OptionRefused.field: `voice`, `speed`, `temperature`, `max_tokens`, `top_p`, …): the
    # refused update's error names that path (ProtocolError.param).
    param_paths: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionUpdated:
    """The options in force after a `SessionUpdate` (never sent on the native wire)."""

    TYPE: ClassVar[str] = "session.updated"
    options: SpeechOptions
    echo: object = None


@dataclass(frozen=True)
class InputClear:
    """Drop the user audio buffered for the turn in progress (OpenAI `input_audio_buffer.clear`)."""


@dataclass(frozen=True)
class Truncate:
    """The user heard only the first `audio_end_ms` of the last reply: keep only that much of
    it in the conversation (OpenAI `conversation.item.truncate`)."""

    audio_end_ms: int


@dataclass(frozen=True)
class InputCommitted:
    """A user turn was taken from the input audio (VAD end of turn or a commit) and joins the
    conversation. The native protocol has no event for it (never sent there)."""

    TYPE: ClassVar[str] = "input.committed"
    audio_ms: int  # the turn's length
    # The server answers it next; False: it waits for AnswerTurns (turn detection's
    # `create_response` false, which the Realtime API's manual turns also have).
    answered: bool = True
    # The turn's id in the conversation's history (ForgetTurn takes it out again).
    turn_id: str = ""


@dataclass(frozen=True)
class AnswerTurns:
    """Answer the user turns that joined the conversation without a response (OpenAI
    `response.create` after turns its VAD ended with `create_response` false)."""

    overrides: ResponseOverrides | None = None  # the response's own options
    # The client's id of the event that asked (the Realtime API's event_id), for the error
    # the conversation sends later if no turn waits.
    event_id: str | None = None


@dataclass(frozen=True)
class InputCleared:
    TYPE: ClassVar[str] = "input.cleared"


@dataclass(frozen=True)
class Truncated:
    TYPE: ClassVar[str] = "reply.truncated"
    audio_end_ms: int


@dataclass(frozen=True)
class ToolOutputs:
    """The results of the last reply's tool calls (OpenAI `function_call_output` items, then
    `response.create`): a turn the model answers, as it answers a user turn."""

    outputs: tuple[str, ...]
    overrides: ResponseOverrides | None = None  # the response's own options
    turn_id: str | None = None  # its id in the conversation's history, for ForgetTurn


@dataclass(frozen=True)
class ToolCall:
    """A tool call the client puts in the conversation (OpenAI `function_call` item): it
    joins the history as the model's turn, with no reply."""

    name: str
    arguments: str
    turn_id: str | None = None  # its id in the conversation's history, for ForgetTurn


@dataclass(frozen=True)
class AssistantMessage:
    """Text the client puts in the conversation as the model's own words (OpenAI `message`
    item with role `assistant`, for a turn-based model): it joins the history as the model's
    turn, with no reply."""

    text: str
    turn_id: str | None = None  # its id in the conversation's history, for ForgetTurn


@dataclass(frozen=True)
class ForgetTurn:
    """Take a turn out of a turn-based conversation (OpenAI `conversation.item.delete`): the
    model hears nothing of it from the next reply on. `turn_id` is the id the turn was given
    (InputCommitted's, a reply's response id, or the one its TextInput, ToolOutputs or
    ToolCall carried); `TurnForgotten` says it is done, an `error` why not."""

    turn_id: str


@dataclass(frozen=True)
class TurnForgotten:
    """A ForgetTurn is done (never sent on the native wire)."""

    TYPE: ClassVar[str] = "turn.forgotten"
    turn_id: str


@dataclass(frozen=True)
class Reply:
    """A text frame an adapter answers with directly, in order with the session's events
    (e.g. an acknowledgement the native protocol has no event for)."""

    text: str


WireInput = (
    ClientEvent
    | SessionUpdate
    | Reply
    | InputClear
    | Truncate
    | ToolOutputs
    | ToolCall
    | AssistantMessage
    | ForgetTurn
)
WireEvent = ServerEvent | SessionUpdated | InputCommitted | InputCleared | Truncated | TurnForgotten
# Events only adapters speak; the native encoder drops them.
_WIRE_ONLY = (
    SessionUpdated,
    InputCommitted,
    InputCleared,
    Truncated,
    TurnForgotten,
)


def overrides_of(event: WireInput) -> ResponseOverrides | None:
    """The options of the response `event` starts, where it carries its own."""
    if isinstance(event, TextInput | AnswerTurns | ToolOutputs):
        return event.overrides
    return None


class Wire:
    """The native protocol (docs/protocol.md): events are JSON text frames, audio is binary frames.
    Adapters subclass it and override what their protocol does differently."""

    subprotocol: str | None = None  # chosen by the handshake, for the app to select

    def opening(self) -> Sequence[WireInput]:
        """Events the session acts on as soon as the socket is open (before any client frame):
        protocols whose sessions start without a client message start them here."""
        return ()

    def decode_text(self, text: str) -> Sequence[WireInput]:
        """One client text frame → what the session does. Raises ProtocolError."""
        return (decode_text_frame(text),)

    def decode_binary(self, data: bytes) -> Sequence[WireInput]:
        return (AudioInput(data),)

    def dispatched(self) -> None:
        """The session has acted on the last decoded frame (its synchronous errors are out)."""

    def refused(self, event: WireInput) -> None:
        """The session refused `event`'s response overrides (the error is out) and did not act
        on it: what the adapter took from its own state to make it goes back."""

    def encode_event(self, event: WireEvent) -> Sequence[OutItem]:
        if isinstance(event, _WIRE_ONLY):
            return ()
        return (OutText(encode_event(event)),)

    def encode_audio(self, data: bytes, duration_ms: int) -> Sequence[OutItem]:
        """One wire frame of a response's audio (and whatever the protocol sends along). The
        audio must stay an OutAudio (whatever it holds) so that the send queue bounds it in
        milliseconds, as backpressure requires."""
        return (OutAudio(data, duration_ms),)
