"""OpenAI Realtime server events, as pure functions that return the JSON text of one event
(or the few events one native event becomes). The vocabulary (dialects, formats) lives in
gateway.realtime_protocol; the mapping from the native session's events is gateway.realtime_outbound."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from gateway.realtime_protocol import GA_FORMAT_OBJECTS, Dialect, RealtimeFormat


@dataclass(frozen=True)
class SessionView:
    """The session resource as the client sees it (`session.created` / `session.updated`)."""

    session_id: str
    model: str
    voice: str | None
    output_format: RealtimeFormat
    input_format: RealtimeFormat | None  # None: the model takes no audio
    turn_detection: dict | None
    instructions: str
    temperature: float
    max_output_tokens: int
    speed: float = 1.0  # the replies' playback speed (time-stretched, pitch unchanged)
    tools: tuple[dict[str, Any], ...] = ()  # as the client gave them (Realtime function tools)
    tool_choice: str = "auto"
    # Transcripts of spoken turns, as asked ({model, language, prompt}); None: off.
    input_transcription: dict[str, Any] | None = None


@dataclass(frozen=True)
class ResponseView:
    """What a response resource shows of the options it runs with: the session's, or those its
    response.create gave it (`response.created` / `response.done`)."""

    voice: str | None = None
    output_format: RealtimeFormat = RealtimeFormat.PCM16
    temperature: float | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] | None = None


@dataclass(frozen=True)
class OutputItem:
    """The one assistant message a response produces, with its audio content part."""

    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


@dataclass(frozen=True)
class CallItem:
    """A `function_call` output item of a response: one tool call of the model's reply."""

    response_id: str
    item_id: str
    call_id: str
    name: str
    output_index: int


@dataclass(frozen=True)
class ResponseOutcome:
    status: str  # completed | cancelled | incomplete | failed
    reason: str | None = None  # client_cancelled | max_output_tokens | None
    error: str | None = None  # the failure's message
    # The text the audio says, as far as the model wrote it: "" where it wrote none (a
    # text-to-speech model, a reply cancelled before its first word). OpenAI's audio parts
    # always carry a string transcript; null is only for user audio nothing transcribed.
    transcript: str = ""


# The server events that show a conversation item as it now stands (what
# conversation.item.retrieve gives back: gateway.realtime_state.ConversationItems).
ITEM_SHOWING = frozenset({"conversation.item.created", "response.output_item.done"})


# _event writes "type" first, so an event's kind is known from the start of its text.
_ITEM_SHOWING_PREFIXES = tuple(f'{{"type":"{kind}",' for kind in sorted(ITEM_SHOWING))


def _event(kind: str, **fields: Any) -> str:
    """The event's JSON text, its "type" first (what `shown_item` reads)."""
    body = {"type": kind, "event_id": f"event_{uuid.uuid4().hex[:20]}", **fields}
    return json.dumps(body, separators=(",", ":"))


def shown_item(text: str) -> dict[str, Any] | None:
    """The conversation item a server event's text shows (an ITEM_SHOWING event's `item`),
    else None. Only those few events a response are parsed: the audio deltas, most of what a
    connection sends, are told apart by their first bytes."""
    if not text.startswith(_ITEM_SHOWING_PREFIXES):
        return None
    item = json.loads(text).get("item")
    return item if isinstance(item, dict) else None


def _format(dialect: Dialect, fmt: RealtimeFormat) -> Any:
    return GA_FORMAT_OBJECTS[fmt] if dialect is Dialect.GA else fmt.value


def session_resource(dialect: Dialect, view: SessionView) -> dict[str, Any]:
    common = {
        "id": view.session_id,
        "object": "realtime.session",
        "model": view.model,
        "instructions": view.instructions,
        "tools": list(view.tools),
        "tool_choice": view.tool_choice,
    }
    if dialect is Dialect.BETA:
        return {
            **common,
            "modalities": ["audio", "text"],
            "voice": view.voice,
            "input_audio_format": view.input_format.value if view.input_format else None,
            "output_audio_format": view.output_format.value,
            "input_audio_transcription": view.input_transcription,
            "turn_detection": view.turn_detection,
            "temperature": view.temperature,
            "max_response_output_tokens": view.max_output_tokens,
            "speed": view.speed,
        }
    audio_in = {"format": _format(dialect, view.input_format)} if view.input_format else {}
    return {
        **common,
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                **audio_in,
                "transcription": view.input_transcription,
                "turn_detection": view.turn_detection,
            },
            "output": {
                "format": _format(dialect, view.output_format),
                "voice": view.voice,
                "speed": view.speed,
            },
        },
        "max_output_tokens": view.max_output_tokens,
    }


def encode_session(kind: str, dialect: Dialect, view: SessionView) -> str:
    """`session.created` or `session.updated`."""
    return _event(kind, session=session_resource(dialect, view))


def _text_part(dialect: Dialect, role: str, text: str) -> dict[str, Any]:
    if role == "assistant":
        kind = "text" if dialect is Dialect.BETA else "output_text"
    else:
        kind = "input_text"
    return {"type": kind, "text": text}


def encode_item_created(
    dialect: Dialect, item_id: str, role: str, text: str, previous_item_id: str | None
) -> str:
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [_text_part(dialect, role, text)],
    }
    return _event("conversation.item.created", previous_item_id=previous_item_id, item=item)


def encode_item_retrieved(item: dict[str, Any]) -> str:
    """`conversation.item.retrieved`: the item as the server last showed it (its
    `conversation.item.created`, or `response.output_item.done` once a response finished it)."""
    return _event("conversation.item.retrieved", item=item)


def encode_item_deleted(item_id: str) -> str:
    return _event("conversation.item.deleted", item_id=item_id)


def _audio_part(dialect: Dialect, transcript: str) -> dict[str, Any]:
    kind = "audio" if dialect is Dialect.BETA else "output_audio"
    return {"type": kind, "transcript": transcript}


def _item(dialect: Dialect, out: OutputItem, status: str, transcript: str) -> dict:
    return {
        "id": out.item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [_audio_part(dialect, transcript)] if status != "in_progress" else [],
    }


def _response(
    dialect: Dialect,
    out: OutputItem,
    status: str,
    output: list,
    details: dict | None = None,
    view: ResponseView = ResponseView(),
) -> dict:
    """The response resource, with the options it runs with (`view`)."""
    body = {
        "id": out.response_id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output,
        "usage": None,
        "metadata": view.metadata,
        "max_output_tokens": view.max_output_tokens,
    }
    if dialect is Dialect.BETA:
        body["modalities"] = ["audio"]
        body["voice"] = view.voice
        body["output_audio_format"] = view.output_format.value
        body["temperature"] = view.temperature
    else:
        body["output_modalities"] = ["audio"]
        output_audio = {"format": _format(dialect, view.output_format), "voice": view.voice}
        body["audio"] = {"output": output_audio}
    return body


def encode_response_started(
    dialect: Dialect,
    out: OutputItem,
    previous_item_id: str | None,
    view: ResponseView = ResponseView(),
) -> list[str]:
    item = _item(dialect, out, "in_progress", "")  # in progress: no content yet
    ids = {"response_id": out.response_id, "output_index": out.output_index}
    part_ids = {**ids, "item_id": out.item_id, "content_index": out.content_index}
    created = _response(dialect, out, "in_progress", [], view=view)
    return [
        _event("response.created", response=created),
        _event("response.output_item.added", item=item, **ids),
        _event("conversation.item.created", previous_item_id=previous_item_id, item=item),
        _event("response.content_part.added", part=_audio_part(dialect, ""), **part_ids),
    ]


def _names(dialect: Dialect) -> tuple[str, str]:
    """(audio event prefix, transcript event prefix) of the dialect."""
    if dialect is Dialect.BETA:
        return "response.audio", "response.audio_transcript"
    return "response.output_audio", "response.output_audio_transcript"


def _part_ids(out: OutputItem) -> dict[str, Any]:
    return {
        "response_id": out.response_id,
        "item_id": out.item_id,
        "output_index": out.output_index,
        "content_index": out.content_index,
    }


def encode_audio_delta(dialect: Dialect, out: OutputItem, audio: bytes) -> str:
    delta = base64.b64encode(audio).decode("ascii")
    return _event(_names(dialect)[0] + ".delta", delta=delta, **_part_ids(out))


def encode_transcript_delta(dialect: Dialect, out: OutputItem, text: str) -> str:
    return _event(_names(dialect)[1] + ".delta", delta=text, **_part_ids(out))


def call_item(call: CallItem, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call.item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": status,
        "name": call.name,
        "call_id": call.call_id,
        "arguments": arguments,
    }


def encode_call_added(call: CallItem, previous_item_id: str | None) -> list[str]:
    """A tool call begins: its item in the response and in the conversation."""
    item = call_item(call, "in_progress", "")
    return [
        _event(
            "response.output_item.added",
            item=item,
            response_id=call.response_id,
            output_index=call.output_index,
        ),
        _event("conversation.item.created", previous_item_id=previous_item_id, item=item),
    ]


def _call_ids(call: CallItem) -> dict[str, Any]:
    return {
        "response_id": call.response_id,
        "item_id": call.item_id,
        "output_index": call.output_index,
        "call_id": call.call_id,
    }


def encode_call_delta(call: CallItem, delta: str) -> str:
    return _event("response.function_call_arguments.delta", delta=delta, **_call_ids(call))


def encode_call_done(dialect: Dialect, call: CallItem, arguments: str, status: str) -> list[str]:
    """The call's arguments are complete (status `completed`), or it ended unfinished or
    malformed (`incomplete`: it cannot be answered)."""
    named = {"name": call.name} if dialect is Dialect.GA else {}
    return [
        _event(
            "response.function_call_arguments.done",
            arguments=arguments,
            **named,
            **_call_ids(call),
        ),
        _event(
            "response.output_item.done",
            item=call_item(call, status, arguments),
            response_id=call.response_id,
            output_index=call.output_index,
        ),
    ]


def encode_call_created(
    item_id: str, call_id: str, name: str, arguments: str, previous_item_id: str | None
) -> str:
    """`conversation.item.created` for a function_call item the client made."""
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "name": name,
        "call_id": call_id,
        "arguments": arguments,
    }
    return _event("conversation.item.created", previous_item_id=previous_item_id, item=item)


def encode_function_output_created(
    item_id: str, call_id: str, output: str, previous_item_id: str | None
) -> str:
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": call_id,
        "output": output,
    }
    return _event("conversation.item.created", previous_item_id=previous_item_id, item=item)


def encode_response_done(
    dialect: Dialect,
    out: OutputItem,
    outcome: ResponseOutcome,
    calls: list[dict[str, Any]] | None = None,
    view: ResponseView = ResponseView(),
) -> list[str]:
    """The reply's audio and transcript done (the transcript's `done` whether or not any
    delta came, as OpenAI sends it for every audio part), its message item done, then
    `response.done` listing it and the response's `function_call` items (`calls`, as
    call_item made them), in output order, with the options it ran with (`view`)."""
    audio, transcript = _names(dialect)
    item_status = "completed" if outcome.status == "completed" else "incomplete"
    item = _item(dialect, out, item_status, outcome.transcript)
    details = None
    if outcome.status != "completed":
        details = {"type": outcome.status, "reason": outcome.reason}
        if outcome.error is not None:
            details["error"] = {"type": "server_error", "message": outcome.error}
    events = [
        _event(audio + ".done", **_part_ids(out)),
        _event(transcript + ".done", transcript=outcome.transcript, **_part_ids(out)),
    ]
    part = _audio_part(dialect, outcome.transcript)
    events += [
        _event("response.content_part.done", part=part, **_part_ids(out)),
        _event(
            "response.output_item.done",
            item=item,
            response_id=out.response_id,
            output_index=out.output_index,
        ),
        _event(
            "response.done",
            response=_response(dialect, out, outcome.status, [item, *(calls or ())], details, view),
        ),
    ]
    return events


def encode_speech_event(kind: str, audio_ms: int, item_id: str) -> str:
    """`input_audio_buffer.speech_started` (audio_start_ms) / `.speech_stopped` (audio_end_ms)."""
    field_name = "audio_start_ms" if kind.endswith("started") else "audio_end_ms"
    return _event(kind, item_id=item_id, **{field_name: audio_ms})


def encode_input_event(
    kind: str, item_id: str | None = None, previous_item_id: str | None = None, **fields: Any
) -> str:
    """`input_audio_buffer.committed` (item_id, previous_item_id), `.cleared`, and
    `conversation.item.truncated` (item_id, content_index, audio_end_ms)."""
    if kind == "input_audio_buffer.committed":
        return _event(kind, previous_item_id=previous_item_id, item_id=item_id)
    if kind == "conversation.item.truncated":
        return _event(kind, item_id=item_id, content_index=0, **fields)
    return _event(kind)


def encode_user_audio_item(item_id: str, previous_item_id: str | None) -> str:
    """`conversation.item.created` for a committed user audio turn. Its transcript is null, as
    OpenAI sends it with input transcription off: the model reads the speech tokens, nothing
    transcribes them."""
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_audio", "transcript": None}],
    }
    return _event("conversation.item.created", previous_item_id=previous_item_id, item=item)


def encode_input_transcript(item_id: str, transcript: str) -> str:
    """`conversation.item.input_audio_transcription.completed`: a spoken turn's words."""
    return _event(
        "conversation.item.input_audio_transcription.completed",
        item_id=item_id,
        content_index=0,
        transcript=transcript,
    )


def encode_input_transcript_failed(item_id: str, message: str) -> str:
    """`conversation.item.input_audio_transcription.failed`: no transcript of the turn."""
    error = {"type": "transcription_error", "code": "model_error", "message": message}
    return _event(
        "conversation.item.input_audio_transcription.failed",
        item_id=item_id,
        content_index=0,
        error=error,
    )


def encode_error(
    error_type: str, code: str, message: str, event_id: str | None, param: str | None = None
) -> str:
    """`error`: `type` is invalid_request_error for the client's mistakes, server_error else."""
    error = {"type": error_type, "code": code, "message": message, "param": param}
    return _event("error", error={**error, "event_id": event_id})
