"""`/v1/realtime` client events → what the native session does (gateway.wire's WireInput).

`RealtimeInbound.decode` takes one client text frame: a decoded event (gateway.realtime_protocol)
goes to the method that handles its type, which checks it against the served model and returns
the session's inputs (or raises ProtocolError, which the session sends back as an `error`).
The replies to them are gateway.realtime_outbound's.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence

from engine.api import ModelFacts, SamplingParams
from gateway.input_transcription import NO_TRANSCRIPTION, InputTranscription
from gateway.protocol import (
    AudioInput,
    ErrorCode,
    InputCommit,
    ProtocolError,
    ResponseCancel,
    SessionStart,
    TextInput,
    TurnDetection,
    TurnDetectionType,
    decode_sampling,
    json_int,
)
from gateway.realtime_events import (
    encode_item_created,
    encode_item_deleted,
    encode_item_retrieved,
)
from gateway.realtime_protocol import (
    UNSET,
    AudioInputEvent,
    ItemCreateEvent,
    ItemRefEvent,
    RealtimeFormat,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionUpdateEvent,
    TruncateEvent,
    decode_client_event,
    event_id_of,
)
from gateway.realtime_state import (
    MAX_ITEMS,
    PREFIX_PADDING_MS,
    SPECS,
    RealtimeState,
    ResponseEcho,
    server_vad_view,
)
from gateway.realtime_tools import FunctionCallEvent, FunctionOutputEvent
from gateway.response_overrides import ResponseOverrides
from gateway.session_start import check_transcription_offered
from gateway.wire import (
    AnswerTurns,
    AssistantMessage,
    ForgetTurn,
    InputClear,
    Reply,
    SessionUpdate,
    ToolCall,
    ToolOutputs,
    Truncate,
    WireInput,
)

# Turn detection fields the server does not change, each with the one value it accepts: what
# it does anyway (OpenAI's defaults, which the official SDKs send). Any other value is refused.
_FIXED_TURN_FIELDS: Mapping[str, tuple[object, str]] = {
    "threshold": (0.5, "the server's VAD (webrtcvad) has no threshold to set"),
    "prefix_padding_ms": (
        PREFIX_PADDING_MS,
        f"a turn's audio always starts {PREFIX_PADDING_MS} ms before the speech",
    ),
    "idle_timeout_ms": (None, "the server sends no idle timeouts"),
    "eagerness": ("auto", "semantic_vad is served by the server's VAD"),
}


def native_turn_detection(
    turn: object, path: str = "session.turn_detection"
) -> TurnDetection | None:
    """A Realtime `turn_detection` (an object, or null: the client commits turns) → the native
    one. `server_vad` and `semantic_vad` both mean the server's VAD, which applies
    `silence_duration_ms`, `create_response` and `interrupt_response`; the other fields are
    refused (ProtocolError, its `param` the field under `path`, where the event holds the
    object) unless they hold the value the server acts on anyway (_FIXED_TURN_FIELDS). A field
    left out takes OpenAI's default: the object replaces the one in force."""
    if turn is UNSET:
        return None
    if turn is None:
        # Manual turns: the client commits each turn and then asks for its response with
        # response.create (OpenAI's commit never starts one), so every committed turn is held.
        return TurnDetection(TurnDetectionType.NONE, create_response=False)
    assert isinstance(turn, dict)
    if turn.get("type", "server_vad") not in ("server_vad", "semantic_vad"):
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            "`turn_detection.type` must be server_vad or semantic_vad",
            f"{path}.type",
        )
    silence = json_int(turn.get("silence_duration_ms", 500))
    if silence is None or not 0 < silence <= 10_000:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            "`silence_duration_ms` must be in 1..10000",
            f"{path}.silence_duration_ms",
        )
    for name, (served, why) in _FIXED_TURN_FIELDS.items():
        if not _is_served(turn.get(name, served), served):
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`turn_detection.{name}` is not applied: {why}; leave it out or send "
                f"{json.dumps(served)}",
                f"{path}.{name}",
            )
    return TurnDetection(
        TurnDetectionType.VAD,
        silence,
        create_response=_flag(turn, "create_response", path),
        interrupt_response=_flag(turn, "interrupt_response", path),
    )


def _flag(turn: dict, name: str, path: str) -> bool:
    """A true/false turn detection field; left out or null, OpenAI's default (true)."""
    value = turn.get(name)
    if value is None:
        return getattr(TurnDetection(), name)
    if not isinstance(value, bool):
        raise ProtocolError(
            ErrorCode.BAD_FIELD, f"`turn_detection.{name}` must be true or false", f"{path}.{name}"
        )
    return value


def _is_served(value: object, served: object) -> bool:
    """Whether a client's value is the served one: numbers by value (300 or 300.0), anything
    else of the same type too (so `1` is not `true`)."""
    if isinstance(served, (int, float)) and not isinstance(served, bool):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == served
    return type(value) is type(served) and value == served


def turn_detection_view(detection: TurnDetection | None) -> object:
    """What `session.updated` shows of the session's turn detection: the server's VAD with the
    silence it applies (UNSET: unchanged; None: off)."""
    if detection is None:
        return UNSET
    if detection.type is TurnDetectionType.NONE:
        return None
    return server_vad_view(detection)


def _refuse_response_flags(detection: TurnDetection, facts: ModelFacts, path: str) -> None:
    """A full-duplex model has no turns: holding or not interrupting a reply means nothing.
    (Turn detection off is accepted and changes nothing: it has no turns to hold either.)"""
    if detection.type is not TurnDetectionType.VAD:
        return
    for name in ("create_response", "interrupt_response"):
        if not getattr(detection, name):
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`turn_detection.{name}` is not applied: {facts.name} is a full-duplex model, "
                "which listens and speaks at once with no turns to answer or interrupt; leave "
                "it out or send true",
                f"{path}.{name}",
            )


def _audio_input_refusal(kind: str, facts: ModelFacts, param: str | None = None) -> ProtocolError:
    """`kind`: the event or field refused; `param`: the field's path (None: the whole event)."""
    return ProtocolError(
        ErrorCode.UNSUPPORTED_INPUT,
        f"{kind}: audio input needs a speech-to-speech model, and {facts.name} is text-to-speech; "
        "send text with conversation.item.create, then response.create",
        param,
    )


def _first_asked(overrides: ResponseOverrides) -> str:
    """The path of the first option a response asks for, for a refusal's `param`."""
    asked = {
        "voice": overrides.voice,
        **overrides.sampling,
        "instructions": overrides.instructions,
        "metadata": overrides.echo.metadata if isinstance(overrides.echo, ResponseEcho) else None,
    }
    name = next(name for name, value in asked.items() if value is not None)
    return overrides.param_paths[name]


def audio_frames(audio: bytes, max_frame_bytes: int) -> tuple[AudioInput, ...]:
    """One `input_audio_buffer.append` as the session's audio frames: OpenAI takes appends of
    up to 15 MiB (clients send 0.5-1 s chunks or whole files), the session's audio path frames
    of at most `max_frame_bytes`. The size is even, so a pcm16 sample is never split."""
    size = max(2, max_frame_bytes - max_frame_bytes % 2)
    return tuple(AudioInput(audio[at : at + size]) for at in range(0, len(audio), size))


class RealtimeInbound:
    def __init__(
        self,
        state: RealtimeState,
        model: str | None,
        max_pending_chars: int,
        max_frame_bytes: int,
        max_text_chars: int,
        transcription: str | None = None,
    ) -> None:
        self._state = state
        self._transcription = transcription  # the server's transcription model, if it has one
        self._facts = state.facts
        self._tools = state.tools
        self._model = model  # the client's `?model=`; the session refuses another model's name
        # The text messages since the last response.create, (item id, text).
        self._pending: list[tuple[str, str]] = []
        self._taken: list[tuple[str, str]] = []  # what the last response.create took of them
        self._taken_outputs: tuple[str, ...] = ()  # the function call outputs' items it took
        self._max_pending_chars = max_pending_chars  # a response's text limit, bounding memory
        self._max_frame_bytes = max_frame_bytes  # the session's limit on one audio frame
        self._max_text_chars = max_text_chars  # the most text one response.create speaks

    @property
    def _pending_text(self) -> list[str]:
        return [text for _, text in self._pending]

    def opening(self) -> Sequence[WireInput]:
        # A Realtime session starts with the connection; `session.created` answers it.
        input_audio = SPECS[RealtimeFormat.PCM16] if self._facts.accepts_audio else None
        start = SessionStart(
            model=self._model, output_audio=SPECS[RealtimeFormat.PCM16], input_audio=input_audio
        )
        return (start,)

    def decode(self, text: str) -> Sequence[WireInput]:
        try:
            event = decode_client_event(text)
        except ProtocolError:
            self._state.event_id = event_id_of(text)
            raise
        self._state.event_id = event.event_id
        if isinstance(event, SessionUpdateEvent):
            return (self._session_update(event),)
        if isinstance(event, ItemCreateEvent | FunctionOutputEvent | FunctionCallEvent):
            self._check_position(event.previous_item_id)
        if isinstance(event, ItemCreateEvent):
            return self._item_create(event)
        if isinstance(event, FunctionOutputEvent):
            return (self._function_output(event),)
        if isinstance(event, FunctionCallEvent):
            return self._function_call(event)
        if isinstance(event, ResponseCreateEvent):
            return self._response_create(event)
        if isinstance(event, ResponseCancelEvent):
            return (ResponseCancel(),)
        if isinstance(event, TruncateEvent):
            return self._truncate(event)
        if isinstance(event, ItemRefEvent):
            return (self._item_ref(event),)
        return self._audio_input(event)

    def decode_binary(self, data: bytes) -> Sequence[WireInput]:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            "the Realtime API carries audio in JSON events (input_audio_buffer.append), "
            "not in binary frames",
        )

    def refused(self, event: WireInput) -> None:
        """The session refused the options of the response `event` starts: what
        response.create took for it waits for the next response.create."""
        if isinstance(event, TextInput):
            self._pending[0:0] = self._taken or [("", event.text)]
            self._state.answering.difference_update(item_id for item_id, _ in self._taken)
            self._taken = []
        elif isinstance(event, ToolOutputs):
            self._tools.give_back(event.outputs, self._taken_outputs)
        if isinstance(event, TextInput | ToolOutputs) and event.turn_id is not None:
            self._state.turn_items.take(event.turn_id)  # no such turn: its items are in none

    def _response_create(self, event: ResponseCreateEvent) -> Sequence[WireInput]:
        state = self._state
        overrides = self._overrides(event)
        if overrides is not None:
            self._refuse_unanswerable(overrides)
        # The answer to a committed audio turn is asked for by the first response.create
        # after the commit at most, whatever that response.create then answers.
        answered, state.audio_turn_answered = state.audio_turn_answered, False
        if self._tools.has_outputs:
            outputs, self._taken_outputs = self._tools.take_outputs()
            return (ToolOutputs(outputs, overrides, self._turn_of(self._taken_outputs)),)
        if self._pending:
            text_to_speak = " ".join(self._pending_text)
            self._taken, self._pending = self._pending, []
            taken = tuple(item_id for item_id, _ in self._taken if item_id)
            state.answering.update(taken)
            own = overrides or ResponseOverrides()
            asked = own.echo if isinstance(own.echo, ResponseEcho) else ResponseEcho()
            echo = dataclasses.replace(asked, items=taken)  # delete refuses them until done
            overrides = dataclasses.replace(own, echo=echo)
            turn_id = self._turn_of(taken) if self._facts.accepts_turns else None
            return (TextInput(text_to_speak, final=True, overrides=overrides, turn_id=turn_id),)
        if answered:
            return ()  # the committed audio turn is already being answered
        if self._facts.accepts_turns:
            # The turns committed with no response (create_response false, or the client's
            # commits with turn detection off): the conversation answers them, or says that
            # none waits (gateway/held_turns.py keeps that fact).
            return (AnswerTurns(overrides, state.event_id),)
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            "nothing to speak: add a user or assistant text message with "
            "conversation.item.create before response.create",
        )

    def _turn_of(self, items: Sequence[str]) -> str:
        """A new turn of the model's conversation, made of `items` (delete takes it out)."""
        turn_id = f"turn_{uuid.uuid4().hex[:16]}"
        for item_id in items:
            self._state.turn_items.add(item_id, turn_id)
        return turn_id

    def _overrides(self, event: ResponseCreateEvent) -> ResponseOverrides | None:
        """The response's own options (None: it asks for none), checked where this side
        knows the answer: the session's output format and tools (which a response may only
        repeat) and the model's system prompt; the session checks the voice and sampling."""
        paths = event.paths
        if event.output_format not in (None, self._state.output_format):
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`{paths['output_format']}` is not applied: a session's responses share one "
                f"audio stream, in the session's format ({self._state.output_format.value}); "
                "change it with session.update, or leave it out",
                paths["output_format"],
            )
        self._tools.check_response(event.tools, event.tool_choice)
        instructions = self._instructions(
            event.instructions, paths.get("instructions", "response.instructions")
        )
        sampling: dict[str, float | int] = {}
        if event.temperature is not None:
            sampling["temperature"] = event.temperature
        if event.max_output_tokens is not None:
            sampling["max_tokens"] = self._max_tokens(event.max_output_tokens)
        asks = event.voice, instructions, event.metadata
        if not sampling and all(value is None for value in asks):
            return None
        return ResponseOverrides(
            event.voice, sampling, instructions, ResponseEcho(event.metadata), paths
        )

    def _refuse_unanswerable(self, overrides: ResponseOverrides) -> None:
        """Options are refused where response.create starts no response they can apply to:
        on a full-duplex model, or when it asks for the answer the server is already giving
        a committed audio turn; and instructions where the response answers no new text
        message (they go with the user's turn)."""
        path = _first_asked(overrides)
        facts = self._facts
        if facts.full_duplex:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`{path}` is not applied: {facts.name} is a full-duplex model, which speaks "
                "in one conversation that the user's audio opens, not in responses that "
                "response.create starts; leave the response's options out",
                path,
            )
        new_turn = self._tools.has_outputs or self._pending
        if self._state.audio_turn_answered and not new_turn:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`{path}` is not applied: this response.create asks for the answer the server "
                "is already giving the committed audio turn (turn detection's "
                "`create_response` true), which has the session's options; for a response "
                "with options of its own, set `create_response` false and ask for it with "
                "response.create",
                path,
            )
        if overrides.instructions is not None and not self._pending_text:
            path = overrides.param_paths["instructions"]
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`{path}` is not applied: a response's own instructions go with the text "
                "message it answers, and this response answers turns already in the "
                "conversation (committed audio, function call outputs), which have the "
                "session's; set them with session.update before the turn, or leave them out",
                path,
            )

    def _instructions(self, instructions: str | None, path: str) -> str | None:
        """The system prompt of the turns to come ("": the model's default; None: unchanged,
        or a model given none, which refuses any but "")."""
        if instructions and not self._facts.system_prompt:
            # Only models with a system prompt (Step-Audio 2, GLM-4-Voice) are steered by
            # them; echoing them back would tell the client they steer the answers.
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"`instructions` are not applied: {self._facts.name} is not given a system "
                "prompt by this server; leave them out (or send an empty string)",
                path,
            )
        return instructions if self._facts.system_prompt else None

    def _max_tokens(self, value: int | str) -> int:
        """A max tokens field: an integer, or "inf": the model's default."""
        if value == "inf":
            return SamplingParams(**self._facts.sampling_defaults).max_tokens
        assert isinstance(value, int)
        return value

    def _session_update(self, event: SessionUpdateEvent) -> SessionUpdate:
        # The Voxgate extension, type-checked.
        sampling = decode_sampling(event.sampling, "session.sampling")
        if event.temperature is not None:
            sampling["temperature"] = event.temperature
        if event.max_output_tokens is not None:
            sampling["max_tokens"] = self._max_tokens(event.max_output_tokens)
        instructions = self._instructions(event.instructions, "session.instructions")
        output = SPECS[event.output_format] if event.output_format is not None else None
        input_audio = SPECS[event.input_format] if event.input_format is not None else None
        paths = event.paths
        if input_audio is not None and not self._facts.accepts_audio:
            raise _audio_input_refusal("input_audio_format", self._facts, paths["input_format"])
        if event.turn_detection not in (UNSET, None) and not self._facts.accepts_audio:
            raise _audio_input_refusal("turn_detection", self._facts, paths["turn_detection"])
        detection = native_turn_detection(event.turn_detection, paths["turn_detection"])
        if self._facts.full_duplex and detection is not None:
            _refuse_response_flags(detection, self._facts, paths["turn_detection"])
        tools, choice = self._tools.update(event)
        transcription = self._input_transcription(event)
        # What the session does not own comes back in SessionUpdated once the update is taken
        # (gateway.realtime_outbound unpacks it).
        turn = turn_detection_view(detection)
        echo = (turn, event.instructions, event.input_format, tools, choice)
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
            input_transcription=transcription,
            param_paths=paths,
        )

    def _input_transcription(self, event: SessionUpdateEvent) -> InputTranscription | None:
        """The update's transcription of spoken turns (NO_TRANSCRIPTION: off; None: not sent),
        refused where there is nothing to transcribe or nothing to transcribe it with."""
        asked = event.input_transcription
        if asked is UNSET:
            return None
        if asked is None:
            return NO_TRANSCRIPTION
        check_transcription_offered(
            self._facts, self._transcription, event.paths["input_transcription"]
        )
        return asked

    def _refuse_while_messages_wait(self, message: str) -> None:
        """Tool items and text messages are answered by separate response.create events."""
        if self._pending_text:
            raise ProtocolError(ErrorCode.BAD_FIELD, message)

    def _function_output(self, event: FunctionOutputEvent) -> Reply:
        self._refuse_while_messages_wait(
            "a response answers either function call outputs or new messages: send "
            "response.create for the messages first"
        )
        item_id, created = self._tools.add_output(event, self._state.last_item_id)
        self._state.last_item_id = item_id
        return Reply(created)

    def _function_call(self, event: FunctionCallEvent) -> Sequence[WireInput]:
        self._refuse_while_messages_wait(
            "messages are waiting for response.create: send it before adding a function_call item"
        )
        item_id, created = self._tools.add_call(event, self._state.last_item_id)
        self._state.last_item_id = item_id
        return (Reply(created), ToolCall(event.name, event.arguments, self._turn_of((item_id,))))

    def _check_position(self, previous_item_id: str | None) -> None:
        """An item goes at the end of the conversation, wherever `previous_item_id` says (the
        model's history is in the order things were said; a client naming the item it last
        saw races the server's own, such as a response's calls); an id the conversation does
        not have is refused, as for retrieve and delete."""
        if previous_item_id in (None, "root") or self._state.items.get(previous_item_id):
            return
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"no item {previous_item_id[:64]!r} in this conversation: previous_item_id names an "
            f"item from its creation on (the server remembers the last {MAX_ITEMS}), or root",
            "previous_item_id",
        )

    def _item_create(self, event: ItemCreateEvent) -> Sequence[WireInput]:
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
                    "item.content",
                )
            self._check_spoken_text(event.text)
        # A system message has nothing to speak; it is acknowledged and otherwise ignored.
        reply = encode_item_created(
            self._state.dialect, item_id, event.role, event.text, self._state.last_item_id
        )
        self._state.last_item_id = item_id
        if event.role == "assistant" and self._facts.accepts_turns:
            return (Reply(reply), *self._model_words(item_id, event.text))
        if event.role in ("user", "assistant"):
            self._pending.append((item_id, event.text))
        return (Reply(reply),)

    def _model_words(self, item_id: str, text: str) -> Sequence[WireInput]:
        """A turn-based model's conversation takes an assistant message as the model's own
        turn, unanswered; the user messages waiting for response.create join it before, as
        one user turn, unanswered too (the order the client put them in)."""
        waiting: tuple[WireInput, ...] = ()
        if self._pending:
            taken, self._pending = self._pending, []
            turn_id = self._turn_of([i for i, _ in taken])
            text_before = " ".join(t for _, t in taken)
            waiting = (TextInput(text_before, final=True, turn_id=turn_id, answered=False),)
        return (*waiting, AssistantMessage(text, self._turn_of((item_id,))))

    def _check_spoken_text(self, text: str) -> None:
        """response.create speaks the waiting messages' text as one text input, which the
        session limits to max_text_chars: a message that would take it over is refused now,
        while the client can still split it, not when the response is asked for."""
        limit = self._max_text_chars
        if len(text) > limit:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"a message's text is limited to {limit} characters (what one response speaks); "
                f"this one has {len(text)}: split it over several responses",
                "item.content",
            )
        spoken = len(" ".join([*self._pending_text, text]))
        if spoken > limit:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"one response speaks at most {limit} characters, and with this message the "
                f"messages waiting for response.create have {spoken}: send response.create "
                "before adding it",
                "item.content",
            )

    def _audio_input(self, event: AudioInputEvent) -> Sequence[WireInput]:
        if not self._facts.accepts_audio:
            raise _audio_input_refusal(event.type, self._facts)
        if event.type == "input_audio_buffer.commit":
            return (InputCommit(),)
        if event.type == "input_audio_buffer.append":
            return audio_frames(event.audio, self._max_frame_bytes)
        return (InputClear(),)

    def _truncate(self, event: TruncateEvent) -> Sequence[WireInput]:
        if not self._facts.accepts_audio:
            raise _audio_input_refusal("conversation.item.truncate", self._facts)
        event.check()
        assert isinstance(event.audio_end_ms, int)
        if event.item_id != self._state.last_reply_item or event.content_index != 0:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "only the audio (content_index 0) of the last finished assistant item can be "
                f"truncated; that is {self._state.last_reply_item!r}",
                "item_id" if event.item_id != self._state.last_reply_item else "content_index",
            )
        self._state.truncating = event.item_id
        return (Truncate(event.audio_end_ms),)

    def _item_ref(self, event: ItemRefEvent) -> WireInput:
        """conversation.item.retrieve / .delete: the item as the client was last shown it, or
        the item out of what the next responses take (ProtocolError where it cannot be). A
        turn-based model's item in its conversation is taken out by the conversation
        (ForgetTurn), whose TurnForgotten the outbound side answers with the deletion of each
        item of that turn."""
        item_id, facts = event.item_id, self._facts
        if event.type == "conversation.item.delete" and facts.full_duplex:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"conversation.item.delete: {facts.name} is a full-duplex model, whose "
                "conversation is one stream the model has already heard, not items that can "
                "be taken out of it",
                "item_id",
            )
        item = self._state.items.get(item_id)
        if item is None:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"no item {item_id[:64]!r} in this conversation: items are known from their "
                f"creation on (conversation.item.created), and the server remembers the last "
                f"{MAX_ITEMS}",
                "item_id",
            )
        if event.type == "conversation.item.retrieve":
            return Reply(encode_item_retrieved(item))
        self._refuse_delete(item_id)
        turn_id = self._state.turn_items.turn_of(item_id)
        if turn_id is not None:
            return ForgetTurn(turn_id)
        self._pending = [(i, text) for i, text in self._pending if i != item_id]
        self._state.items.forget(item_id)
        if self._state.last_item_id == item_id:  # the next item follows the one before
            self._state.last_item_id = self._state.items.newest
        return Reply(encode_item_deleted(item_id))

    def _refuse_delete(self, item_id: str) -> None:
        """An item can be deleted unless the response being given speaks it, or it is a
        function call's output waiting for response.create (its call awaits it)."""
        if item_id in self._state.answering:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"item {item_id!r} is being spoken by the response in progress: cancel it "
                "(response.cancel) and wait for response.done before deleting the item",
                "item_id",
            )
        if self._tools.holds_output(item_id):
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"item {item_id!r} is a function call's output waiting for response.create, "
                "which its call awaits: send response.create, then delete it",
                "item_id",
            )
