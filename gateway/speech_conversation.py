"""What a session needs from a speech model's side of a conversation.

A session of a text-to-speech model plays text responses (gateway/response.py). A session of a
speech-to-speech model has one `SpeechConversation` instead: Moshi's continuous full-duplex
conversation (gateway/duplex.py) or GLM-4-Voice's turns (gateway/turns.py). The session feeds
it audio and client events and runs its loop as the session's player; it never needs to know
which kind it holds.
"""

from __future__ import annotations

from typing import Protocol

from gateway.protocol import AudioSpec, TurnDetection
from gateway.reply import SpeechOptions


class SpeechConversation(Protocol):
    busy: bool  # a reply or conversation is playing or waiting (the session is not idle)
    last_played: float  # monotonic time the last audio went out
    replies: int  # replies (or conversations) opened so far, for the session's close log

    def start(
        self, options: SpeechOptions, input_audio: AudioSpec, detection: TurnDetection
    ) -> None:
        """`session.start` accepted: the options and input format in force."""

    def reconfigure(
        self, options: SpeechOptions, input_audio: AudioSpec | None, detection: TurnDetection | None
    ) -> None:
        """`session.update`: new options (and, where given, input format / turn detection)."""

    def push(self, data: bytes) -> None:
        """One binary frame of user audio. Raises UndecodableAudio or ProtocolError."""

    async def handle(self, event: object) -> bool:
        """A client event this conversation answers (True), else False and the session answers
        it. Raises ProtocolError for one it refuses (answered as a non-fatal `error`)."""

    async def end(self, timeout_s: float) -> None:
        """`session.end`: the conversation's `response.done` is out before this returns."""

    def stop(self) -> None:
        """The session is going away: free the engine's resources, say nothing to the client."""

    async def run(self) -> None:
        """The session's player task."""
