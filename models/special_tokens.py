"""Special tokens resolved by name from a checkpoint's tokenizer (never hard-coded ids)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.checkpoint_errors import CheckpointError


def special_id(tokenizer: Any, name: str, model: str) -> int:
    """The id of the special token `name`; CheckpointError naming `model` where the tokenizer
    lacks it (the wrong tokenizer.json beside the weights)."""
    i = tokenizer.token_to_id(name)
    if i is None:
        raise CheckpointError(f"the tokenizer lacks {model}'s special token {name}")
    return int(i)


def numbered_run(tokenizer: Any, token: Callable[[int], str], model: str) -> tuple[int, int]:
    """The id of `token(0)` and how many of `token(0)`, `token(1)`, … follow it at consecutive
    ids (a speech model's `<audio_i>` tokens, which the model indexes from the first)."""
    base = special_id(tokenizer, token(0), model)
    n = 1
    while tokenizer.token_to_id(token(n)) == base + n:
        n += 1
    return base, n
