"""A Python client for Voxgate's `/v1/stream` protocol (docs/protocol.md).

    import asyncio
    from voxgate.client import connect

    async def main():
        async with connect("ws://127.0.0.1:8000/v1/stream", api_key=None) as session:
            reply = await session.speak("Hello there. How are you?").collect()
            print(reply.status, reply.audio_ms, "ms", reply.words)

    asyncio.run(main())

- `connect(url, api_key=..., voice=..., output_audio=..., sampling=..., extra=...)` opens a
  session (`session.start` → `session.started`, `session.info`).
- `session.speak(text)`: one response's events (`async for`), or `.collect()` → `Reply`
  (PCM decoded with PyAV, frames, words, transcript, status).
- `session.send_text(text, final=False)` streams text in; `session.next_reply()` reads the
  response it opens.
- `session.send_pcm(samples, rate)` / `send_audio(frame)` send microphone audio,
  `commit()` ends a turn; `cancel()` barges in; `report_playback(ms)`.
- `session.events()`: every event (`Audio`, `Words`, `TranscriptDelta`, `ResponseDone` ...).
- Errors are typed (voxgate.client.errors): `Overloaded`, `BadField`, `TooLarge`,
  `AuthenticationError`, `TryAgainLater` ...; `CapacityError` catches every "retry later".
- `voxgate.client.sync.connect` is the same, blocking.
"""

from voxgate.client.connect import connect, session_start_event
from voxgate.client.errors import (
    AlreadyStarted,
    AuthenticationError,
    BadField,
    BadJson,
    CapacityError,
    HandshakeError,
    InternalError,
    InvalidPayload,
    InvalidRequest,
    MessageTooBig,
    ModelError,
    NotStarted,
    Overloaded,
    PolicyViolation,
    RateLimited,
    ServerError,
    ServerFailed,
    ServerUnavailable,
    SessionClosed,
    TooLarge,
    TryAgainLater,
    UnknownType,
    UnsupportedAudio,
    UnsupportedData,
    UnsupportedInput,
    VoxgateError,
)
from voxgate.client.events import (
    Audio,
    Error,
    Event,
    InputTranscript,
    ResponseDone,
    ResponseStarted,
    SessionEnded,
    SessionInfo,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
    UnknownEvent,
    Word,
    Words,
)
from voxgate.client.reply import Reply, ReplyStream
from voxgate.client.session import Session

__all__ = [
    "AlreadyStarted",
    "Audio",
    "AuthenticationError",
    "BadField",
    "BadJson",
    "CapacityError",
    "Error",
    "Event",
    "HandshakeError",
    "InternalError",
    "InvalidPayload",
    "InvalidRequest",
    "MessageTooBig",
    "ModelError",
    "NotStarted",
    "Overloaded",
    "PolicyViolation",
    "RateLimited",
    "Reply",
    "ReplyStream",
    "ResponseDone",
    "ResponseStarted",
    "ServerError",
    "ServerFailed",
    "ServerUnavailable",
    "Session",
    "SessionClosed",
    "SessionEnded",
    "SessionInfo",
    "SpeechStarted",
    "SpeechStopped",
    "InputTranscript",
    "TooLarge",
    "TranscriptDelta",
    "TryAgainLater",
    "UnknownEvent",
    "UnknownType",
    "UnsupportedAudio",
    "UnsupportedData",
    "UnsupportedInput",
    "VoxgateError",
    "Word",
    "Words",
    "connect",
    "session_start_event",
]
