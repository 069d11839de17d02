"""CSM's sequence layout: one row per backbone position, `num_codebooks` audio codes then one
text token, -1 where a column is absent.

transformers' CSM (and Sesame's reference) builds a conversation as turns of
`<|begin_of_text|>[{speaker}]{text}<|end_of_text|>`; a context turn is followed by its audio,
one position per Mimi frame (`<|AUDIO|>`, embedded as the sum of its codebooks' embeddings),
and an end-of-audio position (`<|audio_eos|>`, embedded as an all-zero frame). The turn to
speak comes last, text only; generation then emits one frame per step. Here a text position is
a row with only the text column set, an audio position a row with only the codes set, so the
backbone embeds every row the same way: sum of the embeddings of its present columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ABSENT = -1
BEGIN_OF_TEXT = 128000
END_OF_TEXT = 128001

Row = tuple[int, ...]


@dataclass(frozen=True)
class VoicePrompt:
    """A context turn: what was said, by which speaker id, and its Mimi codes [frames, K]."""

    speaker: int
    text: str
    codes: np.ndarray


def text_rows(token_ids: list[int], num_codebooks: int) -> list[Row]:
    blank = (ABSENT,) * num_codebooks
    return [(*blank, t) for t in token_ids]


def audio_rows(codes: np.ndarray, eos_code: int) -> list[Row]:
    """The frames of a context turn, then its end-of-audio frame (every codebook `eos_code`)."""
    k = codes.shape[1]
    frames = [(*map(int, frame), ABSENT) for frame in codes]
    return [*frames, (eos_code,) * k + (ABSENT,)]


def turn_ids(tokenizer, speaker: int, text: str) -> list[int]:
    """`<|begin_of_text|>[{speaker}]{text}<|end_of_text|>` as token ids."""
    return [
        BEGIN_OF_TEXT,
        *tokenizer.encode(f"[{speaker}]{text}", add_special_tokens=False).ids,
        END_OF_TEXT,
    ]


def prompt_rows(
    tokenizer,
    speaker: int,
    text: str,
    context: list[VoicePrompt],
    num_codebooks: int,
    eos_code: int,
) -> list[Row]:
    rows: list[Row] = []
    for turn in context:
        rows += text_rows(turn_ids(tokenizer, turn.speaker, turn.text), num_codebooks)
        rows += audio_rows(turn.codes, eos_code)
    return rows + text_rows(turn_ids(tokenizer, speaker, text), num_codebooks)
