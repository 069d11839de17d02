"""Client JSON, parsed the same way on every endpoint (WebSocket frames and HTTP bodies).

JSON's `\\uXXXX` escapes can spell half of a UTF-16 surrogate pair alone (`"\\ud800"`); Python
decodes it to a string that is not text: it cannot be encoded as UTF-8, so it would fail later,
deep in a tokenizer, a phonemizer or a log line, as an internal error. I-JSON (RFC 7493) rules
such strings out, and so does this parser, up front, with a message saying what is wrong.
A text frame or body is valid UTF-8 already, so an escape is the only way one gets in; frames
without a `\\u` escape (nearly all of them, audio included) are not walked.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class LoneSurrogate(ValueError):
    """A JSON string holds half of a UTF-16 surrogate pair: no character."""


def loads(text: str | bytes | bytearray, **kwargs: Any) -> Any:
    """json.loads, refusing strings (keys included) that hold a lone surrogate (LoneSurrogate, a
    ValueError as json's own errors are)."""
    obj = json.loads(text, **kwargs)
    if _may_hold_surrogates(text):
        _refuse_surrogates(obj)
    return obj


def _may_hold_surrogates(text: str | bytes | bytearray) -> bool:
    if isinstance(text, str):
        return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    return b"\\u" in text and _SURROGATE_ESCAPE_BYTES.search(text) is not None


def _refuse_surrogates(obj: Any) -> None:
    pending = [obj]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found is not None:
                raise LoneSurrogate(
                    f"a string holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x} at "
                    f"character {found.start()}), which is no character: send the character "
                    "itself, or both escapes of its surrogate pair"
                )
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
