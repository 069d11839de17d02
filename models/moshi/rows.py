"""The layout of Moshi's rows and its acoustic delays, in one place.

A row is one temporal-transformer position: `[text, moshi_0..moshi_7, user_0..user_7]` (17 ids).
Codebook 0 of each audio stream (semantic) is not delayed; codebooks 1..7 (acoustic) are one
frame late, as transformers' `build_delay_pattern_mask` and kyutai's `delays` define them. Row
0 holds only initial tokens (text id `text_vocab`, audio id `audio_vocab`). For position p ≥ 1:

    text      = the text token sampled at position p-1
    moshi_0   = Moshi frame p-1, codebook 0 (sampled at p-1)
    moshi_k   = Moshi frame p-2, codebook k (sampled at p-1; the initial token at p = 1)
    user_0    = user frame p-1, codebook 0
    user_k    = user frame p-2, codebook k (the initial token at p = 1)

So the depth stage at position p draws codebook 0 of Moshi's frame p and codebooks 1..7 of its
frame p-1: Moshi's audio frame n is complete after position n+1, the step that consumed the
user's frame n. One user frame in, one Moshi frame out, every 80 ms.
"""

from __future__ import annotations

TEXT = 0
MOSHI = 1  # first of Moshi's codebook columns
ABSENT = -1  # user columns of a freshly sampled row, filled when the user's frame is in


def initial_row(num_codebooks: int, text_vocab: int, audio_vocab: int) -> tuple[int, ...]:
    return (text_vocab,) + (audio_vocab,) * (2 * num_codebooks)


def sampled_row(text: int, codes: list[int], num_codebooks: int) -> tuple[int, ...]:
    """What the depth stage yields for position p: text and Moshi's codes, user columns absent."""
    return (text, *codes) + (ABSENT,) * num_codebooks


def next_input_row(
    sampled: tuple[int, ...],
    position: int,
    user_now: list[int],
    user_prev: list[int] | None,
    audio_vocab: int,
) -> tuple[int, ...]:
    """The input row of position `position + 1` from the row sampled at `position`, the user's
    frame `position` (`user_now`) and frame `position - 1` (`user_prev`, None for the first)."""
    k = len(user_now)
    moshi = list(sampled[MOSHI : MOSHI + k])
    if position == 0:  # Moshi's acoustic codes of frame -1 do not exist
        moshi[1:] = [audio_vocab] * (k - 1)
    user = [user_now[0]] + (
        list(user_prev[1:]) if user_prev is not None else [audio_vocab] * (k - 1)
    )
    return (sampled[TEXT], *moshi, *user)


def undelay(previous_semantic: int | None, sampled: tuple[int, ...], k: int) -> list[int] | None:
    """Moshi's complete frame ending at this sampled row (its codebook 0 from the row before,
    codebooks 1..k-1 from this one), or None for the first row."""
    if previous_semantic is None:
        return None
    return [previous_semantic, *sampled[MOSHI + 1 : MOSHI + k]]
