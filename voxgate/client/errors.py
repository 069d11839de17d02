"""Typed errors for the protocol's error codes and close codes (docs/protocol.md).

    VoxgateError
    ├── ServerError                one `error` event; `.code`, `.fatal`, `.close_code`
    │   ├── InvalidRequest         what the client sent was wrong: fix it, do not retry as is
    │   │   └── BadJson, UnknownType, BadField, NotStarted, AlreadyStarted,
    │   │       UnsupportedAudio, UnsupportedInput, TooLarge
    │   ├── RateLimited            too many responses queued: wait for one to finish
    │   ├── Overloaded             (also a CapacityError) no room now: retry later
    │   ├── ModelError             the model failed on this request
    │   └── InternalError          the server failed
    ├── SessionClosed              the socket closed without an `error` saying why; `.code`
    │   ├── UnsupportedData (1003), InvalidPayload (1007), PolicyViolation (1008),
    │   │   MessageTooBig (1009), ServerFailed (1011)
    │   └── TryAgainLater (1013)   (also a CapacityError)
    ├── AuthenticationError        the key was missing or wrong (HTTP 401/403, or 1008 at once)
    ├── HandshakeError             the server refused the WebSocket for another reason
    │   └── ServerUnavailable      HTTP 503: the engine is not loaded yet (also a CapacityError)
    └── CapacityError              mixin: no capacity now (Overloaded, TryAgainLater)

A fatal `error` is followed by a close; the client raises the error's class with `close_code`
set, so `except Overloaded` and `except CapacityError` both catch a session refused with
`overloaded` / 1013.
"""

from __future__ import annotations

from gateway.protocol_codes import CloseCode, ErrorCode


class VoxgateError(Exception):
    """Anything the Voxgate client raises for the server's answer."""


class CapacityError(VoxgateError):
    """The server has no capacity for this now; the same request may succeed later."""


class ServerError(VoxgateError):
    """An `error` event. `code` is the protocol's error code (a plain string for a code this
    client does not know); `close_code` is set when the error ended the session."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        fatal: bool = False,
        close_code: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.fatal = fatal
        self.close_code = close_code


class InvalidRequest(ServerError):
    """The server could not honour what the client sent; the message says what it accepts."""


class BadJson(InvalidRequest):
    pass


class UnknownType(InvalidRequest):
    pass


class BadField(InvalidRequest):
    pass


class NotStarted(InvalidRequest):
    pass


class AlreadyStarted(InvalidRequest):
    pass


class UnsupportedAudio(InvalidRequest):
    pass


class UnsupportedInput(InvalidRequest):
    pass


class TooLarge(InvalidRequest):
    pass


class RateLimited(ServerError):
    pass


class Overloaded(ServerError, CapacityError):
    pass


class ModelError(ServerError):
    pass


class InternalError(ServerError):
    pass


ERROR_CLASSES: dict[ErrorCode, type[ServerError]] = {
    ErrorCode.BAD_JSON: BadJson,
    ErrorCode.UNKNOWN_TYPE: UnknownType,
    ErrorCode.BAD_FIELD: BadField,
    ErrorCode.NOT_STARTED: NotStarted,
    ErrorCode.ALREADY_STARTED: AlreadyStarted,
    ErrorCode.UNSUPPORTED_AUDIO: UnsupportedAudio,
    ErrorCode.UNSUPPORTED_INPUT: UnsupportedInput,
    ErrorCode.TOO_LARGE: TooLarge,
    ErrorCode.RATE_LIMITED: RateLimited,
    ErrorCode.OVERLOADED: Overloaded,
    ErrorCode.MODEL_ERROR: ModelError,
    ErrorCode.INTERNAL: InternalError,
}


def server_error(
    code: str, message: str, fatal: bool = False, close_code: int | None = None
) -> ServerError:
    """The typed exception for an `error` event's code."""
    try:
        known = ErrorCode(code)
    except ValueError:
        return ServerError(code, message, fatal, close_code)
    return ERROR_CLASSES[known](known, message, fatal, close_code)


class SessionClosed(VoxgateError):
    """The server closed the session without an `error` event saying why."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"session closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class UnsupportedData(SessionClosed):
    pass


class InvalidPayload(SessionClosed):
    pass


class PolicyViolation(SessionClosed):
    pass


class MessageTooBig(SessionClosed):
    pass


class ServerFailed(SessionClosed):
    pass


class TryAgainLater(SessionClosed, CapacityError):
    pass


CLOSE_CLASSES: dict[CloseCode, type[SessionClosed]] = {
    CloseCode.UNSUPPORTED_DATA: UnsupportedData,
    CloseCode.INVALID_PAYLOAD: InvalidPayload,
    CloseCode.POLICY: PolicyViolation,
    CloseCode.TOO_BIG: MessageTooBig,
    CloseCode.INTERNAL_ERROR: ServerFailed,
    CloseCode.TRY_AGAIN_LATER: TryAgainLater,
}


def session_closed(code: int | None, reason: str = "") -> SessionClosed:
    """The typed exception for a close code (1000 too: a normal close nobody expected)."""
    try:
        known = CloseCode(code) if code is not None else None
    except ValueError:
        known = None
    cls = CLOSE_CLASSES.get(known, SessionClosed) if known is not None else SessionClosed
    return cls(code, reason)


class AuthenticationError(VoxgateError):
    """The server wants an API key and did not get a valid one (`status`: 401 missing, 403
    wrong; None when it closed the socket with 1008 before any other message)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class HandshakeError(VoxgateError):
    """The server refused the WebSocket handshake (`status`: its HTTP status, if any)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnavailable(HandshakeError, CapacityError):
    """HTTP 503: the server is up but cannot serve sessions yet (its engine is loading)."""
