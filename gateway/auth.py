"""Who may open a session: Origin allow-list, API keys, and concurrent-session caps.

Keys arrive as `Authorization: Bearer <key>` or, from browsers (which cannot set headers on a
WebSocket), as an offered subprotocol `bearer.<key>` (or `openai-insecure-api-key.<key>`, the
one OpenAI Realtime browser clients offer). A key is never echoed back (only
`voxgate.v1` is ever selected) and never logged: logs name a key by its position in the
configured list (`key-0`, `key-1` …).
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.admission import KEY_SESSIONS, MAX_SESSIONS, NOT_READY
from gateway.config import normalize_origin
from gateway.protocol_codes import BEARER_SUBPROTOCOL_PREFIX, SUBPROTOCOL, CloseCode, ErrorCode


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. `key_id` is None when the server runs without keys."""

    key_id: str | None = None

    @property
    def label(self) -> str:
        return self.key_id or "anonymous"


@dataclass(frozen=True)
class Denial:
    """The handshake is refused with this HTTP status."""

    status: int
    message: str


@dataclass(frozen=True)
class SlotRefusal:
    """The handshake succeeded, but the session may not run: error event, then close."""

    code: ErrorCode
    close_code: CloseCode
    message: str
    cause: str  # what /metrics counts it under (gateway/admission.py: max_sessions, key_sessions)


def select_subprotocol(offered: Iterable[str]) -> str | None:
    """Only the protocol name is ever selected: a `bearer.` entry must never be echoed."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


def _bearer_from_header(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# Subprotocols that carry a key: ours, and the one OpenAI Realtime browser clients offer.
KEY_SUBPROTOCOL_PREFIXES = (BEARER_SUBPROTOCOL_PREFIX, "openai-insecure-api-key.")


def _bearer_from_subprotocols(offered: Iterable[str]) -> str | None:
    for name in offered:
        for prefix in KEY_SUBPROTOCOL_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                return name[len(prefix) :]
    return None


class Authenticator:
    def __init__(self, api_keys: Iterable[str], allowed_origins: Iterable[str]) -> None:
        self._keys = tuple(k.encode() for k in api_keys)
        self._origins = frozenset(normalize_origin(o) for o in allowed_origins)

    def check(self, headers: Mapping[str, str], subprotocols: Iterable[str]) -> Principal | Denial:
        """Decide on a handshake from its (lower-cased) headers and offered subprotocols."""
        origin = headers.get("origin")
        # Non-browser clients send no Origin; the allow-list exists to stop other web pages.
        if self._origins and origin is not None and normalize_origin(origin) not in self._origins:
            return Denial(403, "origin not allowed")
        if not self._keys:
            return Principal()
        offered = list(subprotocols)
        key = _bearer_from_header(headers.get("authorization")) or _bearer_from_subprotocols(
            offered
        )
        if key is None:
            return Denial(
                401, "an API key is required (Authorization: Bearer, or subprotocol bearer.<key>)"
            )
        index = self._match(key.encode())
        if index is None:
            return Denial(403, "invalid API key")
        return Principal(key_id=f"key-{index}")

    def _match(self, key: bytes) -> int | None:
        # Compare against every key, without stopping early, so timing says nothing about which
        # configured key a guess came close to.
        found = None
        for i, candidate in enumerate(self._keys):
            if hmac.compare_digest(candidate, key):
                found = i
        return found


# A session or speech request that comes while the server stops: refused as one beyond
# capacity is (error `overloaded`, close 1013, HTTP 503), so clients retry elsewhere or later;
# counted as `not_ready`.
STOPPING = SlotRefusal(
    ErrorCode.OVERLOADED,
    CloseCode.TRY_AGAIN_LATER,
    "the server is stopping: connect again later or to another server",
    NOT_READY,
)


class SessionSlots:
    """Open sessions per key and server-wide; a slot is held from accept to close (a
    WebSocket session) or to the end of the body (an HTTP speech request). Once `closed` (the
    server stops), every new one is refused."""

    def __init__(self, max_sessions: int, max_per_key: int) -> None:
        self.max_sessions = max_sessions
        self.max_per_key = max_per_key
        self._per_key: Counter[str] = Counter()
        self.total = 0
        self.closed = False

    def acquire(self, principal: Principal) -> SlotRefusal | None:
        if self.closed:
            return STOPPING
        if self.total >= self.max_sessions:
            return SlotRefusal(
                ErrorCode.OVERLOADED,
                CloseCode.TRY_AGAIN_LATER,
                f"the server is at its limit of {self.max_sessions} sessions; try again later",
                MAX_SESSIONS,
            )
        key = principal.key_id
        if key is not None and self.max_per_key and self._per_key[key] >= self.max_per_key:
            return SlotRefusal(
                ErrorCode.RATE_LIMITED,
                CloseCode.POLICY,
                f"this API key already has {self.max_per_key} open sessions",
                KEY_SESSIONS,
            )
        self.total += 1
        if key is not None:
            self._per_key[key] += 1
        return None

    def release(self, principal: Principal) -> None:
        self.total -= 1
        if principal.key_id is not None:
            self._per_key[principal.key_id] -= 1
            if self._per_key[principal.key_id] <= 0:
                del self._per_key[principal.key_id]

    def open_for(self, principal: Principal) -> int:
        return self._per_key[principal.key_id] if principal.key_id else 0
