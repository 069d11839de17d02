"""Orpheus's special tokens, prompt layout and audio-token ↔ SNAC-code mapping.

Orpheus extends the Llama 3 vocabulary (128256 text tokens) with `<custom_token_N>` =
128256 + N. Audio is SNAC 24 kHz: each ~85 ms frame has 7 codes over 3 levels, emitted as
7 consecutive tokens; the token for code c at position p (0..6) of its frame is
128266 + p * 4096 + c, so every position owns its own 4096-token range.
"""

from __future__ import annotations

BEGIN_OF_TEXT = 128000
END_OF_TEXT = 128009  # <|eot_id|>
START_OF_SPEECH = 128257  # custom_token_1
END_OF_SPEECH = 128258  # custom_token_2: the stop token
START_OF_HUMAN = 128259  # custom_token_3
END_OF_HUMAN = 128260  # custom_token_4
START_OF_AI = 128261  # custom_token_5
AUDIO_BASE = 128266  # custom_token_10
CODEBOOK_SIZE = 4096
CODES_PER_FRAME = 7
AUDIO_END = AUDIO_BASE + CODES_PER_FRAME * CODEBOOK_SIZE  # 156938, exclusive
VOCAB_SIZE = 156940

# Orpheus writes a frame as [l0, l1a, l2a, l2b, l1b, l2c, l2d]; SNAC's hierarchical order is
# [l0, l1a, l1b, l2a, l2b, l2c, l2d]. SNAC_ORDER[i] is the Orpheus position of SNAC slot i.
SNAC_ORDER = (0, 1, 4, 2, 3, 5, 6)


def prompt_ids(text_ids: list[int]) -> list[int]:
    """`text_ids` is the tokenizer's encoding of "{voice}: {text}" (begins with BEGIN_OF_TEXT).
    The assistant turn is opened up to START_OF_SPEECH, as Orpheus's own server does, so every
    generated token is an audio token (or the stop token)."""
    return [START_OF_HUMAN, *text_ids, END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]


def audio_range(position: int) -> tuple[int, int]:
    """The [lo, hi) token range valid at `position` within a frame."""
    lo = AUDIO_BASE + (position % CODES_PER_FRAME) * CODEBOOK_SIZE
    return lo, lo + CODEBOOK_SIZE


def code_of(token: int, position: int) -> int | None:
    """The SNAC code a token stands for at `position` in its frame, or None if it is not an
    audio token of that position (the reference decoder skips such tokens; so do we)."""
    code = token - AUDIO_BASE - (position % CODES_PER_FRAME) * CODEBOOK_SIZE
    return code if 0 <= code < CODEBOOK_SIZE else None


def frame_to_snac(frame: list[int]) -> list[int]:
    """7 codes in Orpheus order → SNAC hierarchical order."""
    return [frame[i] for i in SNAC_ORDER]


def codes_to_tokens(frames: list[list[int]]) -> list[int]:
    """Inverse mapping (frames in Orpheus order → tokens); used by tests and tools."""
    return [AUDIO_BASE + p * CODEBOOK_SIZE + c for frame in frames for p, c in enumerate(frame)]
