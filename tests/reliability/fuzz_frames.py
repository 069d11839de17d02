"""Fuzzed client frames, each with the answer the protocol documents for it (PROTOCOL.md's error
codes; docs/gateway.md): random bytes, truncated and malformed JSON, wrong types, huge numbers,
unicode edge cases, binary where text belongs. Every frame here is invalid by construction, so
every one must get exactly one non-fatal error (the session stays usable); `oversized` is the
one fatal frame (too_large, close 1009). Seeded: a failure names its seed and frame."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

# Strings that trouble decoders and encoders: controls, BOM, bidi overrides, a lone surrogate
# (legal in a JSON escape, unencodable in UTF-8), combining marks, astral and ZWJ emoji,
# non-characters, and long ones.
UNICODE_EDGES = [
    "\x00",
    "\x7f\x1b[31m",
    "\ufeff",
    "\u202etxet",
    "\ud800",
    "\udfff\ud800",
    "e" + "\u0301" * 500,
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\uffff\ufffe",
    "\U0010ffff",
    "ｔｅｘｔ",
    "x" * 5000,
]
HUGE_NUMBERS = [10**40, -(10**40), 1e308, -1e308, 2**63, -(2**63) - 1, 1e-320, -0.0]


@dataclass(frozen=True)
class Fuzz:
    kind: str  # the frame's category (for failure messages)
    text: str | None = None  # a text frame
    data: bytes | None = None  # or a binary frame
    codes: frozenset[str] = frozenset()  # the error codes the protocol allows for it


def _codes(*codes: str) -> frozenset[str]:
    return frozenset(codes)


def _edge_codes(edge: str, *codes: str) -> frozenset[str]:
    """The codes for a frame carrying a UNICODE_EDGES string: a lone surrogate is no text, so
    the frame is refused as JSON before its fields are read (gateway/client_json.py)."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in edge):
        return _codes("bad_json")
    return _codes(*codes)


def _random_text(rng: random.Random, n: int) -> str:
    # Raw text frames must be UTF-8: a lone surrogate only ever travels as a JSON escape.
    alphabet = '{}[]":,0123456789.eE+-truefalsnl \\/u' + "".join(UNICODE_EDGES[:4]) + "é€😀"
    return "".join(rng.choice(alphabet) for _ in range(n))


def native_frame(rng: random.Random, max_frame_bytes: int) -> Fuzz:
    """A frame for a started /v1/stream session of a text-only model."""
    pick = rng.randrange(9)
    if pick == 0:  # random bytes, as text
        text = _random_text(rng, rng.randint(0, 200))
        return Fuzz("random text", text=text, codes=_codes("bad_json", "bad_field"))
    if pick == 1:  # a valid event, cut short
        whole = json.dumps({"type": "text", "text": "Hello there.", "final": True})
        return Fuzz(
            "truncated", text=whole[: rng.randrange(1, len(whole))], codes=_codes("bad_json")
        )
    if pick == 2:  # a JSON value that is not an object, or an object without a string type
        value = rng.choice([[], [1, 2], 7, "text", None, True, {}, {"type": None}, {"type": 5}])
        return Fuzz("not an event", text=json.dumps(value), codes=_codes("bad_json", "bad_field"))
    if pick == 3:  # wrong types for known fields
        event = rng.choice(
            [
                {"type": "text", "text": rng.choice([5, None, [], {"a": 1}, True])},
                {"type": "text", "text": "hi", "final": "yes"},
                {"type": "playback", "played_ms": rng.choice(["10", None, [], -1])},
                {"type": "session.start", "sampling": rng.choice([5, "hot", []])},
                {"type": "session.start", "sampling": {"temperature": "hot"}},
                {"type": "session.start", "voice": 7},
                {"type": "session.start", "output_audio": {"format": 7}},
            ]
        )
        codes = _codes("bad_field", "unsupported_audio")  # an output_audio of no known format
        return Fuzz("wrong type", text=json.dumps(event), codes=codes)
    if pick == 4:  # huge numbers where numbers belong
        number = rng.choice(HUGE_NUMBERS)
        event = rng.choice(
            [
                {"type": "session.start", "sampling": {"max_tokens": number}},
                {"type": "session.start", "sampling": {"temperature": number, "top_p": 7}},
                {"type": "playback", "played_ms": -abs(number) - 1},
                {
                    "type": "session.start",
                    "output_audio": {"format": "pcm16", "sample_rate": number},
                },
            ]
        )
        # A second session.start whose fields decode is refused as already_started.
        codes = _codes("bad_field", "unsupported_audio", "already_started")
        return Fuzz("huge number", text=json.dumps(event), codes=codes)
    if pick == 5:  # unicode edge cases as the event type
        kind = rng.choice(UNICODE_EDGES)
        codes = _edge_codes(kind, "unknown_type")
        return Fuzz("unicode type", text=json.dumps({"type": kind}), codes=codes)
    if pick == 6:  # JSON's non-standard constants and deep nesting
        text = rng.choice(
            ['{"type": "playback", "played_ms": NaN}', '{"type": "text", "text": Infinity}']
            + ["[" * 100_000 + "]" * 100_000]
        )
        return Fuzz("odd JSON", text=text, codes=_codes("bad_json"))
    if pick == 7:  # binary where text belongs (a text-only model takes no audio)
        size = rng.choice([0, 1, 17, 960, max_frame_bytes + 1])
        codes = _codes("unsupported_input", "too_large")
        return Fuzz("binary", data=rng.randbytes(size), codes=codes)
    # a second session.start
    return Fuzz(
        "start again", text=json.dumps({"type": "session.start"}), codes=_codes("already_started")
    )


def oversized(limit: int) -> Fuzz:
    """One frame over --max-message-bytes: error too_large (fatal), close 1009."""
    text = json.dumps({"type": "text", "text": "a" * (limit + 1)})
    return Fuzz("oversized", text=text, codes=_codes("too_large"))


def realtime_frame(rng: random.Random) -> Fuzz:
    """A frame for a /v1/realtime session of a text-only model."""
    pick = rng.randrange(6)
    if pick == 0:
        text = _random_text(rng, rng.randint(0, 200))
        return Fuzz("random text", text=text, codes=_codes("bad_json", "bad_field"))
    if pick == 1:
        whole = json.dumps({"type": "response.create", "event_id": "e1"})
        return Fuzz(
            "truncated", text=whole[: rng.randrange(1, len(whole))], codes=_codes("bad_json")
        )
    if pick == 2:
        kind = rng.choice(UNICODE_EDGES)
        codes = _edge_codes(kind, "unknown_type")
        return Fuzz("unicode type", text=json.dumps({"type": kind}), codes=codes)
    if pick == 3:
        event = rng.choice(
            [
                {"type": "session.update", "session": rng.choice([5, "x", []])},
                {"type": "conversation.item.create", "item": rng.choice([5, None, "x"])},
                {"type": "response.create"},  # nothing to speak yet
                {
                    "type": "session.update",
                    "session": {"max_output_tokens": rng.choice([-(10**40), 0, -1])},
                },
            ]
        )
        return Fuzz("wrong field", text=json.dumps(event), codes=_codes("bad_field", "bad_json"))
    if pick == 4:
        return Fuzz(
            "binary", data=rng.randbytes(rng.choice([0, 5, 960])), codes=_codes("bad_field")
        )
    value = rng.choice([[], 7, None, {}, {"type": 5}])
    return Fuzz("not an event", text=json.dumps(value), codes=_codes("bad_json", "bad_field"))


def twilio_frame(rng: random.Random, stream_sid: str) -> Fuzz:
    """A frame for a started /v1/twilio stream. Twilio has no error message: each is counted
    (voxgate_errors_total) and nothing is sent back."""
    pick = rng.randrange(5)
    if pick == 0:
        text = _random_text(rng, rng.randint(0, 200))
        return Fuzz("random text", text=text, codes=_codes("bad_json", "unknown_type"))
    if pick == 1:
        return Fuzz(
            "binary", data=rng.randbytes(rng.choice([0, 7, 160])), codes=_codes("bad_field")
        )
    if pick == 2:
        kind = rng.choice(UNICODE_EDGES)
        event = {"event": kind, "streamSid": stream_sid}
        return Fuzz(
            "unicode event", text=json.dumps(event), codes=_edge_codes(kind, "unknown_type")
        )
    if pick == 3:
        sid = rng.choice(UNICODE_EDGES)
        event = {"event": "mark", "streamSid": sid, "mark": {"name": "x"}}
        return Fuzz("foreign stream", text=json.dumps(event), codes=_edge_codes(sid, "bad_field"))
    value = rng.choice([[], 7, None, {}, {"event": 5}])
    return Fuzz("not a message", text=json.dumps(value), codes=_codes("bad_json"))
