"""Which voices each API key has added from clips: bounded per key (count and bytes the engine
holds for them) and in all, least recently used first out. Pure bookkeeping: the caller
(gateway/client_voices.py) tells the engine to forget what this evicts.

A key sees only its own voices: every lookup takes the key, and a voice of another key is
answered exactly as a voice that does not exist.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class ClientVoice:
    voice_id: str  # what `voice` names in session.start / POST /v1/audio/speech
    key: str  # the owner: an API key's label (gateway/auth.py), "anonymous" without keys
    label: str  # the name the client gave it (or its id)
    seconds: float  # the clip's length
    nbytes: int  # what the engine holds for it


@dataclass(frozen=True)
class VoiceLimits:
    per_key: int  # voices; 0: clients cannot add voices
    bytes_per_key: int
    total: int  # voices of every key together


class VoiceLRU:
    def __init__(self, limits: VoiceLimits) -> None:
        self.limits = limits
        self._voices: OrderedDict[str, ClientVoice] = OrderedDict()  # oldest use first
        self._added: dict[str, ClientVoice] = {}  # the same voices, in the order added

    def __len__(self) -> int:
        return len(self._voices)

    def owned(self, key: str) -> list[ClientVoice]:
        """The key's voices, in the order they were added."""
        return [v for v in self._added.values() if v.key == key]

    def get(self, key: str, voice_id: str) -> ClientVoice | None:
        voice = self._voices.get(voice_id)
        return voice if voice is not None and voice.key == key else None

    def touch(self, key: str, voice_id: str) -> bool:
        """Mark a use (a session or request with it); False if the key has no such voice."""
        if self.get(key, voice_id) is None:
            return False
        self._voices.move_to_end(voice_id)
        return True

    def fits(self, nbytes: int) -> bool:
        """Whether one voice of this size can be kept at all."""
        limits = self.limits
        return limits.per_key > 0 and limits.total > 0 and nbytes <= limits.bytes_per_key

    def add(self, voice: ClientVoice) -> list[ClientVoice]:
        """Keep `voice` (as the most recently used) and return the voices evicted to make room:
        the key's least recently used past its count or bytes, then anyone's past the total."""
        if not self.fits(voice.nbytes):
            raise ValueError("the voice does not fit the limits (check fits() first)")
        self._voices[voice.voice_id] = voice
        self._added[voice.voice_id] = voice
        evicted = []
        while self._over_key(voice.key):
            evicted.append(self._pop_oldest(voice.key))
        while len(self._voices) > self.limits.total:
            evicted.append(self._pop_oldest(None))
        return evicted

    def remove(self, key: str, voice_id: str) -> ClientVoice | None:
        voice = self.get(key, voice_id)
        if voice is not None:
            del self._voices[voice_id], self._added[voice_id]
        return voice

    def clear(self) -> list[ClientVoice]:
        voices = list(self._added.values())
        self._voices.clear()
        self._added.clear()
        return voices

    def _over_key(self, key: str) -> bool:
        mine = [v for v in self._voices.values() if v.key == key]
        return (
            len(mine) > self.limits.per_key
            or sum(v.nbytes for v in mine) > self.limits.bytes_per_key
        )

    def _pop_oldest(self, key: str | None) -> ClientVoice:
        voice_id = next(v.voice_id for v in self._voices.values() if key in (None, v.key))
        del self._added[voice_id]
        return self._voices.pop(voice_id)
