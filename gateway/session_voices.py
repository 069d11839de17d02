"""The voices one session sees: the model's, then those its API key added from clips
(gateway/client_voices.py); and session.start's `voice_clip`, made into a voice of that key."""

from __future__ import annotations

import dataclasses

from engine.api import EngineClient, ModelFacts
from gateway.client_voices import ClientVoices, clip_refusal
from gateway.clip_audio import ClipError
from gateway.protocol import CloseCode, ErrorCode, SessionStart

# A refused voice_clip: the fatal error's code and message, and the close code.
Refusal = tuple[ErrorCode, str, CloseCode]


class SessionVoices:
    """`client_voices` None: an endpoint without voices from clips (Twilio)."""

    def __init__(
        self, engine: EngineClient, principal: str, client_voices: ClientVoices | None
    ) -> None:
        self._engine = engine
        self._principal = principal
        self._client_voices = client_voices

    def facts(self) -> ModelFacts:
        """The model's facts as this session's key sees them: its added voices too."""
        if self._client_voices is None:
            return self._engine.facts
        return self._client_voices.facts_for(self._engine, self._principal)

    def touch(self, voice: str | None) -> None:
        """The session uses `voice`: if it is one of the key's, it is the last one evicted."""
        if self._client_voices is not None:
            self._client_voices.touch(self._principal, voice)

    async def with_clip(self, event: SessionStart) -> SessionStart | Refusal:
        """`event` (which has a voice_clip) with the clip made into a voice of this key (as POST
        /v1/voices makes it) and chosen, or the refusal to end the session with."""
        if self._client_voices is None:
            return (
                ErrorCode.UNSUPPORTED_INPUT,
                "this endpoint takes no voice_clip",
                CloseCode.UNSUPPORTED_DATA,
            )
        try:
            voice = await self._client_voices.add(self._engine, self._principal, event.voice_clip)
        except ClipError as exc:
            return clip_refusal(exc)
        return dataclasses.replace(event, voice=voice.voice_id, voice_clip=None)
