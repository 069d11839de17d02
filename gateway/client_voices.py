"""Voices clients add from a clip (POST /v1/voices, or session.start's `voice_clip`): checked
(gateway/clip_audio.py), encoded once by the engine where the model lives (AddClipVoice),
kept per API key in a bounded LRU (gateway/voice_lru.py) and forgotten by the engine when
evicted or deleted.

A voice's id (`clip-<16 hex>`) is what `voice` names afterwards, on every route, for the key
that added it only: `facts_for(facts, key)` is the model's facts as that key sees them, its
own voices added to the model's, and every voice check runs against it.

The engine holds the encoded voices, and they outlive its restarts: the gateway's engine
records each clip it is given and hands them all to an engine rebuilt after a crash before it
serves (gateway/replica_voices.py), so the list here stays true. With engine replicas the
voices go to the gateway's engine, the pool, whichever replica a session talks to: it gives
each to every replica and again to a rebuilt one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Callable
from typing import Any

from engine.api import EngineClient, EngineDead, EngineOverloaded, ModelFacts, ModelInputError
from gateway.clip_audio import ClipError, check_request, decode_base64, read_clip
from gateway.config import GatewaySettings
from gateway.protocol import ClipUpload, CloseCode, ErrorCode
from gateway.voice_lru import ClientVoice, VoiceLimits, VoiceLRU

log = logging.getLogger("voxgate.voices")

MAX_LABEL_CHARS = 64
ENCODING_AT_ONCE = 2  # clips decoded and encoded together; more wait their turn
MAX_WAITING = 16  # past this many waiting, an add is refused as busy


class ClientVoices:
    def __init__(
        self, settings: GatewaySettings, home: Callable[[], EngineClient | None] | None = None
    ) -> None:
        """`home`: the gateway's engine, where voices are added and removed whatever engine a
        caller names (a session's is one replica of a pool; the pool gives every replica the
        voice). Without it, or while it gives None, the engine the caller names."""
        self._settings = settings
        self._home = home
        self._lru = VoiceLRU(
            VoiceLimits(
                settings.client_voices_per_key,
                settings.client_voice_bytes_per_key,
                settings.max_client_voices,
            )
        )
        self._encoding = asyncio.Semaphore(ENCODING_AT_ONCE)
        self._waiting = 0
        self._made_by: Any = None  # the engine that holds the listed voices

    # --- what the routes and sessions ask -------------------------------------------------------
    def owned(self, engine: EngineClient, key: str) -> list[ClientVoice]:
        engine = self._holder(engine)
        self._sync(engine)
        return self._lru.owned(key)

    def facts_for(self, engine: EngineClient, key: str) -> ModelFacts:
        """The model's facts as `key` sees them: its own voices after the model's."""
        facts = engine.facts
        mine = tuple(v.voice_id for v in self.owned(engine, key))
        if not mine:
            return facts
        return dataclasses.replace(facts, voices=facts.voices + mine)

    def touch(self, key: str, voice: str | None) -> None:
        """A session or request uses `voice`: if it is one of the key's, it is used last."""
        if voice is not None:
            self._lru.touch(key, voice)

    def remove(self, engine: EngineClient, key: str, voice_id: str) -> bool:
        """Delete one of the key's voices; False when the key has none by that id."""
        engine = self._holder(engine)
        self._sync(engine)
        voice = self._lru.remove(key, voice_id)
        if voice is None:
            return False
        engine.remove_clip_voice(voice_id)
        log.info("voice %s removed key=%s", voice_id, key)
        return True

    async def add(self, engine: EngineClient, key: str, upload: ClipUpload) -> ClientVoice:
        """Check, decode and encode a clip, and keep the voice for `key`. Raises ClipError."""
        engine = self._holder(engine)
        self._sync(engine)
        facts = engine.facts
        transcript = check_request(facts, upload.transcript)
        label = _label(upload.name)
        if self._lru.limits.per_key == 0:
            raise ClipError("voices_disabled", "this server does not keep voices from clients", 403)
        data = decode_base64(upload.audio, self._settings.max_clip_bytes)
        if self._waiting >= MAX_WAITING:
            raise ClipError("busy", "too many clips are being encoded; try again shortly", 503)
        self._waiting += 1
        try:
            async with self._encoding:
                clip = await asyncio.to_thread(
                    read_clip, data, transcript, facts, self._settings.max_clip_bytes
                )
                voice_id = f"clip-{secrets.token_hex(8)}"
                nbytes = await _encode(engine, voice_id, clip)
        finally:
            self._waiting -= 1
        self._sync(engine)
        if not self._lru.fits(nbytes):
            engine.remove_clip_voice(voice_id)
            raise ClipError(
                "clip_too_large",
                f"the encoded voice holds {nbytes} bytes, over this key's "
                f"{self._lru.limits.bytes_per_key}; send a shorter clip",
                413,
            )
        voice = ClientVoice(voice_id, key, label or voice_id, round(clip.seconds, 3), nbytes)
        for old in self._lru.add(voice):
            engine.remove_clip_voice(old.voice_id)
            log.info("voice %s evicted key=%s (least recently used)", old.voice_id, old.key)
        log.info("voice %s added key=%s seconds=%.2f bytes=%d", voice_id, key, clip.seconds, nbytes)
        return voice

    def _holder(self, engine: EngineClient) -> EngineClient:
        home = self._home() if self._home is not None else None
        return engine if home is None else home

    def _sync(self, engine: EngineClient) -> None:
        """Forget every voice when the gateway's engine is another one (a supervisor or a pool
        stays the same across restarts of the engines it holds, and restores their voices)."""
        if self._made_by is not engine:
            if self._made_by is not None and len(self._lru):
                log.warning("the engine was replaced: %d client voices are gone", len(self._lru))
            self._lru.clear()
            self._made_by = engine


# A refused session.start voice_clip: its error and close codes (the rest: bad_field, 1007).
_CLIP_REFUSALS = {
    "cloning_unsupported": (ErrorCode.UNSUPPORTED_INPUT, CloseCode.UNSUPPORTED_DATA),
    "voices_disabled": (ErrorCode.UNSUPPORTED_INPUT, CloseCode.UNSUPPORTED_DATA),
    "clip_too_large": (ErrorCode.TOO_LARGE, CloseCode.TOO_BIG),
    "busy": (ErrorCode.OVERLOADED, CloseCode.TRY_AGAIN_LATER),
    "engine_unavailable": (ErrorCode.OVERLOADED, CloseCode.TRY_AGAIN_LATER),
}


def clip_refusal(error: ClipError) -> tuple[ErrorCode, str, CloseCode]:
    """The fatal error a session answers a refused voice_clip with: code, message (ending
    with the check that failed, for clients to match on) and close code."""
    code, close = _CLIP_REFUSALS.get(error.code, (ErrorCode.BAD_FIELD, CloseCode.INVALID_PAYLOAD))
    return code, f"voice_clip: {error.message} ({error.code})", close


async def _encode(engine: EngineClient, voice_id: str, clip) -> int:
    try:
        return await engine.add_clip_voice(voice_id, clip)
    except asyncio.CancelledError:  # the caller left: the engine must not keep an unlisted voice
        engine.remove_clip_voice(voice_id)
        raise
    except ModelInputError as exc:
        raise ClipError("clip_rejected", f"the model could not use the clip: {exc}") from None
    except (EngineDead, EngineOverloaded, RuntimeError) as exc:
        raise ClipError("engine_unavailable", f"{exc}; try again later", 503) from None


def _label(label: str | None) -> str | None:
    if label is not None and not 0 < len(label.strip()) <= MAX_LABEL_CHARS:
        raise ClipError("bad_name", f"`name` must be 1 to {MAX_LABEL_CHARS} characters")
    return label.strip() if label else None
