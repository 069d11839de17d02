"""A conversation → Step-Audio 2 prompt ids (the chat format of models/step_audio2/tokens.py).

    <|BOT|>system\\n{system prompt}<|EOT|>
    <|BOT|>human\\n{text | <audio_start>{audio slots}<audio_end>}<|EOT|>
    <|BOT|>assistant\\n<tts_start>{reply …}<|EOT|>
    <|BOT|>human\\n …

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

MAX_TEXT_CHARS = 4000


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


@dataclass(frozen=True)
class AssistantTurn:
    """The model's reply as generated ids (text and speech interleaved), truncated by the
    caller to what the user heard on barge-in."""

    token_ids: tuple[int, ...]


Turn = UserTurn | AssistantTurn
SlotIds = Callable[[Hashable, torch.Tensor], list[int]]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def _user_ids(tokenizer: Any, ids: StepAudio2Ids, turn: UserTurn, slots: SlotIds) -> list[int]:
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


def conversation_ids(
    tokenizer: Any,
    ids: StepAudio2Ids,
    turns: Sequence[Turn],
    slots: SlotIds,
    default_system: str = T.DEFAULT_SYSTEM_PROMPT,
) -> list[int]:
    """Prompt ids for `turns` (user, assistant, …, user), ending where the reply begins."""
    if not turns or not isinstance(turns[-1], UserTurn):
        raise ModelInputError("a conversation to answer must end with a user turn")
    if not isinstance(turns[0], UserTurn):
        raise ModelInputError("a conversation starts with a user turn")
    out: list[int] = []
    system: str | None = None
    opener = [ids.bot, *_encode(tokenizer, f"{T.ASSISTANT_ROLE}\n"), ids.tts_start]
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
                out += [ids.bot, *_encode(tokenizer, f"{T.SYSTEM_ROLE}\n{wanted}"), ids.eot]
                system = wanted
            out += [ids.bot, *_encode(tokenizer, f"{T.USER_ROLE}\n")]
            out += [*_user_ids(tokenizer, ids, turn, slots), ids.eot, *opener]
        else:
            out += [t for t in turn.token_ids if t not in ids.stop_ids] + [ids.eot]
    return out
