"""A conversation → GLM-4-Voice prompt ids (the format of models/glm_voice/tokens.py).

The system prompt is GLM-4-Voice's output-format instruction (13 text tokens, then 26 audio
tokens), which the model was trained on and which must stay. A session's instructions (the
Realtime API's `instructions`) are appended to it, after it, as more of the same system
message: the format instruction is unchanged, word for word, and a conversation without
instructions gets exactly the reference demo's prompt. A user turn carrying instructions that
differ from those in force gets a new `<|system|>` message before it (GLM-4's chat format
takes a system message at any point), so earlier turns' ids never change and their KV stays
reusable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.base import ModelInputError
from models.glm_voice import tokens as T
from models.glm_voice.tokens import GlmVoiceIds

MAX_TEXT_CHARS = 4000


@dataclass(frozen=True)
class UserTurn:
    """What the user said: text, or speech as the speech tokenizer's ids (12.5 per second)."""

    text: str | None = None
    speech_tokens: tuple[int, ...] | None = None
    # The session's instructions from this turn on (None: those in force; "": none).
    system: str | None = None
    # Taken out of the conversation (erased): an empty user message in its place, which
    # keeps the turns alternating, its instructions and, as the first turn, the system
    # prompt's modality (speech_tokens () for a spoken turn).
    erased: bool = False


@dataclass(frozen=True)
class AssistantTurn:
    """What the model said, as generated token ids (text and audio interleaved), truncated by
    the caller to what the user heard on barge-in."""

    token_ids: tuple[int, ...]


Turn = UserTurn | AssistantTurn


def assistant_text(tokenizer: Any, text: str) -> AssistantTurn:
    """Text the client puts in the conversation as the model's words: a reply of text tokens
    alone (no speech)."""
    text = text.strip()
    if not text:
        raise ModelInputError("the assistant message is empty: give it text")
    if len(text) > MAX_TEXT_CHARS:
        raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return AssistantTurn(tuple(tokenizer.encode(text, add_special_tokens=False).ids))


def erased(turn: Turn) -> Turn:
    """The turn as it stays in a conversation it was taken out of (Realtime's
    conversation.item.delete): a user turn empty, a reply with no tokens."""
    if isinstance(turn, AssistantTurn):
        return AssistantTurn(())
    speech = None if turn.speech_tokens is None else ()
    return UserTurn(speech_tokens=speech, system=turn.system, erased=True)


def _user_ids(tokenizer: Any, ids: GlmVoiceIds, turn: UserTurn) -> list[int]:
    if turn.erased:
        return []
    if turn.speech_tokens is not None:
        if not turn.speech_tokens:
            raise ModelInputError(
                "the turn's audio gave no speech tokens: send at least 80 ms of speech"
            )
        bad = [t for t in turn.speech_tokens if not 0 <= t < ids.num_audio]
        if bad:
            raise ModelInputError(
                f"speech token {bad[0]} is outside the codebook (0..{ids.num_audio - 1})"
            )
        return [
            ids.begin_of_audio,
            *(ids.audio_base + t for t in turn.speech_tokens),
            ids.end_of_audio,
        ]
    text = (turn.text or "").strip()
    if not text:
        raise ModelInputError("the user turn is empty: give it text or speech")
    if len(text) > MAX_TEXT_CHARS:
        raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return tokenizer.encode(text, add_special_tokens=False).ids


def system_prompt(format_prompt: str, instructions: str) -> str:
    """The format instruction, then the session's instructions (if any) after it."""
    if not instructions:
        return format_prompt
    if len(instructions) > MAX_TEXT_CHARS:
        raise ModelInputError(
            f"the instructions are {len(instructions)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    return f"{format_prompt.rstrip()} {instructions}"


def conversation_ids(tokenizer: Any, ids: GlmVoiceIds, turns: Sequence[Turn]) -> list[int]:
    """Prompt ids for `turns` (user, assistant, …, user), ending where the model's reply begins.
    The system prompt follows the first user turn's modality, as the reference demo does. A
    prefix of the ids of a longer conversation is the ids of the shorter one, so the KV of an
    earlier turn is reusable as a prefix."""
    if not turns or not isinstance(turns[-1], UserTurn):
        raise ModelInputError("a conversation to answer must end with a user turn")
    first = turns[0]
    if not isinstance(first, UserTurn):
        raise ModelInputError("a conversation starts with a user turn")
    form = T.SPEECH_SYSTEM_PROMPT if first.speech_tokens is not None else T.TEXT_SYSTEM_PROMPT
    out = [*ids.prefix]
    mode = tokenizer.encode("\n", add_special_tokens=False).ids
    reply_opener = tokenizer.encode(T.ASSISTANT_MODE, add_special_tokens=False).ids
    instructions, in_force = "", None
    for turn in turns:
        if isinstance(turn, UserTurn):
            if turn.system is not None:
                instructions = turn.system.strip()
            wanted = system_prompt(form, instructions)
            if wanted != in_force:
                out += [ids.system, *tokenizer.encode("\n" + wanted, add_special_tokens=False).ids]
                in_force = wanted
            out += [ids.user, *mode, *_user_ids(tokenizer, ids, turn), ids.assistant, *reply_opener]
        else:
            # The reply's own tokens; the next <|user|> closes it (it is also the stop token).
            out += [t for t in turn.token_ids if t not in ids.stop_ids]
    return out
