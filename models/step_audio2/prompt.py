"""A conversation → Step-Audio 2 prompt ids (the chat format of models/step_audio2/tokens.py).

    <|BOT|>system\\n{system prompt}<|EOT|>
    <|BOT|>human\\n{text | <audio_start>{audio slots}<audio_end>}<|EOT|>
    <|BOT|>assistant\\n<tts_start>{reply …}<|EOT|>
    <|BOT|>human\\n …

With tools (models/step_audio2/tool_format.py) a `<|BOT|>tool_json_schemas\\n[…]<|EOT|>` message
follows the first system message, and a turn of tool results is one `<|BOT|>input\\n{result}<|EOT|>`
message per result, answered as a user turn is. The tools sit before the whole history: a
conversation whose tools change shares ids with the old one only up to them.

A user turn may carry a system prompt: it is written before that turn when it differs from
the one in force (the first turn without one gets the model's default). Earlier turns' ids
never change, so a conversation's ids are a prefix of its continuation's (KV reuse)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from models.base import ModelInputError
from models.step_audio2 import tokens as T
from models.step_audio2.tokens import StepAudio2Ids
from models.step_audio2.tool_format import TOOL_RESULT_ROLE, TOOLS_ROLE, call_text

MAX_TEXT_CHARS = 4000
MAX_TOOLS_CHARS = 32768  # the tools message (names, descriptions, schemas)
MAX_TOOL_OUTPUT_CHARS = 32768  # one turn's tool results together


@dataclass(frozen=True, eq=False)
class SpokenAudio:
    """A user turn's audio as the adapter's embeddings [n, width] (12.5 a second, on the
    CPU), and the key that keeps its slots (audio_slots.py) across the conversation."""

    key: Hashable
    embeds: torch.Tensor


@dataclass(frozen=True)
class UserTurn:
    text: str | None = None
    audio: SpokenAudio | None = None
    # The system prompt from this turn on (None: unchanged; "": the model's default).
    system: str | None = None
    # Taken out of the conversation (erased): an empty user message in its place, which keeps
    # the turns alternating and its system prompt.
    erased: bool = False


@dataclass(frozen=True)
class AssistantTurn:
    """The model's reply as generated ids (text and speech interleaved), truncated by the
    caller to what the user heard on barge-in."""

    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class ToolsMessage:
    """The session's tools as the tools message's content (tool_format.tools_json). It leads
    a conversation's turns when the session has tools."""

    json_text: str


@dataclass(frozen=True)
class ToolResultTurn:
    """The results of the last reply's tool calls, in call order: the model answers them as
    it answers a user turn."""

    outputs: tuple[str, ...]


Turn = UserTurn | AssistantTurn | ToolResultTurn
SlotIds = Callable[[Hashable, torch.Tensor], list[int]]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def assistant_text(tokenizer: Any, text: str) -> AssistantTurn:
    """Text the client puts in the conversation as the model's words: its assistant message
    with text tokens alone (no speech codes)."""
    text = text.strip()
    if not text:
        raise ModelInputError("the assistant message is empty: give it text")
    if len(text) > MAX_TEXT_CHARS:
        raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return AssistantTurn(tuple(_encode(tokenizer, text)))


def erased(turn: Turn) -> Turn:
    """The turn as it stays in a conversation it was taken out of (Realtime's
    conversation.item.delete): a user turn empty, a reply with no tokens, tool results
    empty (one empty result a call, as many as there were)."""
    if isinstance(turn, AssistantTurn):
        return AssistantTurn(())
    if isinstance(turn, ToolResultTurn):
        return ToolResultTurn(("",) * len(turn.outputs))
    return UserTurn(system=turn.system, erased=True)


def _user_ids(tokenizer: Any, ids: StepAudio2Ids, turn: UserTurn, slots: SlotIds) -> list[int]:
    if turn.erased:
        return []
    if turn.audio is not None:
        if turn.audio.embeds.shape[0] == 0:
            raise ModelInputError("the turn's audio is too short: send at least 80 ms of speech")
        return [ids.audio_start, *slots(turn.audio.key, turn.audio.embeds), ids.audio_end]
    text = (turn.text or "").strip()
    if not text:
        raise ModelInputError("the user turn is empty: give it text or speech")
    if len(text) > MAX_TEXT_CHARS:
        raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return _encode(tokenizer, text)


def tools_message(json_text: str) -> ToolsMessage:
    if len(json_text) > MAX_TOOLS_CHARS:
        raise ModelInputError(
            f"the tools take {len(json_text)} characters; the limit is {MAX_TOOLS_CHARS}: "
            "offer fewer tools or shorter descriptions"
        )
    return ToolsMessage(json_text)


def tool_result_turn(outputs: Sequence[str]) -> ToolResultTurn:
    if not outputs:
        raise ModelInputError("a turn of tool results needs at least one result")
    total = sum(len(o) for o in outputs)
    if total > MAX_TOOL_OUTPUT_CHARS:
        raise ModelInputError(
            f"the tool results take {total} characters; the limit is {MAX_TOOL_OUTPUT_CHARS}"
        )
    return ToolResultTurn(tuple(outputs))


def tool_call_turn(tokenizer: Any, name: str, arguments: str) -> AssistantTurn:
    """A call the client put in the conversation, as the model would have written it."""
    if len(arguments) > MAX_TOOL_OUTPUT_CHARS:
        raise ModelInputError(
            f"the call's arguments are {len(arguments)} characters; the limit is "
            f"{MAX_TOOL_OUTPUT_CHARS}"
        )
    return AssistantTurn(tuple(_encode(tokenizer, call_text(name, arguments))))


def _message(tokenizer: Any, ids: StepAudio2Ids, role: str, content: str) -> list[int]:
    return [ids.bot, *_encode(tokenizer, f"{role}\n{content}"), ids.eot]


def conversation_ids(
    tokenizer: Any,
    ids: StepAudio2Ids,
    turns: Sequence[Turn | ToolsMessage],
    slots: SlotIds,
    default_system: str = T.DEFAULT_SYSTEM_PROMPT,
) -> list[int]:
    """Prompt ids for `turns` (user, assistant, …, user or tool results), ending where the
    reply begins; a leading ToolsMessage lists the tools after the first system message."""
    tools = turns[0] if turns and isinstance(turns[0], ToolsMessage) else None
    turns = turns[1:] if tools is not None else turns
    if not turns or not isinstance(turns[-1], UserTurn | ToolResultTurn):
        raise ModelInputError("a conversation to answer must end with a user turn")
    if not isinstance(turns[0], UserTurn):
        raise ModelInputError("a conversation starts with a user turn")
    out: list[int] = []
    system: str | None = None
    opener = [ids.bot, *_encode(tokenizer, f"{T.ASSISTANT_ROLE}\n"), ids.tts_start]
    opened = False  # the assistant message the next AssistantTurn fills is begun
    for turn in turns:
        if isinstance(turn, UserTurn):
            if turn.system is None:
                wanted = system or default_system
            else:  # "": back to the default
                wanted = turn.system or default_system
            if wanted != system:
                if len(wanted) > MAX_TEXT_CHARS:
                    raise ModelInputError(
                        f"the system prompt is {len(wanted)} characters; the limit is "
                        f"{MAX_TEXT_CHARS}"
                    )
                out += _message(tokenizer, ids, T.SYSTEM_ROLE, wanted)
                if system is None and tools is not None:
                    out += _message(tokenizer, ids, TOOLS_ROLE, tools.json_text)
                system = wanted
            out += [ids.bot, *_encode(tokenizer, f"{T.USER_ROLE}\n")]
            out += [*_user_ids(tokenizer, ids, turn, slots), ids.eot, *opener]
            opened = True
        elif isinstance(turn, ToolResultTurn):
            for output in turn.outputs:
                out += _message(tokenizer, ids, TOOL_RESULT_ROLE, output)
            out += opener
            opened = True
        else:  # an assistant turn after another one (a client's call) is a message of its own
            out += [] if opened else opener
            out += [t for t in turn.token_ids if t not in ids.stop_ids] + [ids.eot]
            opened = False
    return out
