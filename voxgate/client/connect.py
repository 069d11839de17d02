"""Opening a session: `connect()` and the `session.start` event it sends (docs/protocol.md,
"Connection"). A refused handshake or session raises its typed error (voxgate.client.errors)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from gateway.protocol_codes import BEARER_SUBPROTOCOL_PREFIX, SUBPROTOCOL
from voxgate.client.errors import (
    AuthenticationError,
    HandshakeError,
    ServerUnavailable,
    VoxgateError,
)
from voxgate.client.session import Session

__all__ = ["connect", "session_start_event"]


def session_start_event(
    *,
    model: str | None = None,
    voice: str | None = None,
    input_audio: Mapping[str, Any] | None = None,
    output_audio: Mapping[str, Any] | None = None,
    sampling: Mapping[str, Any] | None = None,
    turn_detection: Mapping[str, Any] | None = None,
    speed: float | None = None,
    input_transcription: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `session.start` event: the fields given (None ones left out, so the server's
    defaults apply), then `extra` merged over them: fields this client does not name yet
    (per-request model options, an inline voice clip ...) go there."""
    event: dict[str, Any] = {"type": "session.start"}
    named = {
        "model": model,
        "voice": voice,
        "input_audio": input_audio,
        "output_audio": output_audio,
        "sampling": sampling,
        "turn_detection": turn_detection,
        "speed": speed,
        "input_transcription": input_transcription,
    }
    event.update(
        {k: dict(v) if isinstance(v, Mapping) else v for k, v in named.items() if v is not None}
    )
    event.update(extra or {})
    return event


class _Connecting:
    """`connect(...)`: awaitable (the Session) and an async context manager (closed after)."""

    def __init__(self, open_session) -> None:
        self._open = open_session
        self._session: Session | None = None

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()


def connect(
    url: str,
    *,
    api_key: str | None = None,
    key_in_subprotocol: bool = False,
    model: str | None = None,
    voice: str | None = None,
    input_audio: Mapping[str, Any] | None = None,
    output_audio: Mapping[str, Any] | None = None,
    sampling: Mapping[str, Any] | None = None,
    turn_detection: Mapping[str, Any] | None = None,
    speed: float | None = None,
    input_transcription: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    decode_audio: bool = True,
    open_timeout: float = 30.0,
    start_timeout: float = 30.0,
    **websocket_options: Any,
) -> _Connecting:
    """Open a session at `url` (`ws://HOST:PORT/v1/stream`):

        async with connect(url, api_key=KEY) as session:
            reply = await session.speak("Hello there.").collect()

    `api_key` goes in an `Authorization` header (`key_in_subprotocol`: in an offered
    `bearer.<key>` subprotocol, as browsers must). The session fields are session.start's
    (docs/protocol.md; None leaves the server's default; `speed`, 0.25-4.0, plays the
    session's replies faster or slower, pitch unchanged; `input_transcription`, {} or
    {language, prompt}, asks for InputTranscript events of spoken turns), `extra` is merged into the event
    as it is. `decode_audio=False` keeps frames as the bytes sent (`Audio.pcm` None).
    Raises AuthenticationError, HandshakeError, or the typed error of a refused session
    (Overloaded, BadField, UnsupportedAudio ...)."""
    start = session_start_event(
        model=model,
        voice=voice,
        input_audio=input_audio,
        output_audio=output_audio,
        sampling=sampling,
        turn_detection=turn_detection,
        speed=speed,
        input_transcription=input_transcription,
        extra=extra,
    )
    subprotocols = [SUBPROTOCOL]
    headers = {}
    if api_key and key_in_subprotocol:
        subprotocols.append(BEARER_SUBPROTOCOL_PREFIX + api_key)
    elif api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    options = {
        "proxy": None,
        "max_size": None,  # the server caps its own frames; a long PCM chunk may be large
        "ping_interval": None,
        "close_timeout": 2,
        **websocket_options,
    }

    async def open_session() -> Session:
        try:
            ws = await ws_connect(
                url,
                subprotocols=subprotocols,
                additional_headers=headers or None,
                open_timeout=open_timeout,
                **options,
            )
        except InvalidStatus as exc:
            raise _handshake_error(exc) from None
        except InvalidHandshake as exc:
            raise HandshakeError(f"{url} did not accept a WebSocket: {exc}") from None
        session = Session(ws, decode_audio)
        try:
            await session._start(start, start_timeout)
        except BaseException:
            await session.close()
            raise
        return session

    return _Connecting(open_session)


def _handshake_error(exc: InvalidStatus) -> VoxgateError:
    status = exc.response.status_code
    body = exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
    message = f"HTTP {status}{': ' + body if body else ''}"
    if status == 401:  # no key was sent: saying one was refused would mislead
        return AuthenticationError(f"the server requires an API key: pass api_key ({message})", 401)
    if status == 403:  # the body says why: a wrong key, or an Origin not allowed
        return AuthenticationError(f"the server refused this client ({message})", 403)
    if status == 503:
        return ServerUnavailable(f"the server cannot take sessions yet ({message})", status)
    return HandshakeError(f"the server refused the WebSocket ({message})", status)
