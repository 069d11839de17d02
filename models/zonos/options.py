"""Zonos' per-request conditioning, typed, with the published defaults (`make_cond_dict` of the
official package) and clear errors for values outside the ranges its conditioners were
trained on. A request's options (request_options.py's flat names, or `emotion` as 8 weights
or a map by name, and `language`) become one through ZonosConditioning.from_request."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from models.base import ModelInputError
from models.zonos.phonemes import language_id
from models.zonos.request_options import ZonosRequestOptions

# The emotion conditioner's 8 inputs, in order.
EMOTIONS = ("happiness", "sadness", "disgust", "fear", "surprise", "anger", "other", "neutral")
_PUBLISHED = ZonosRequestOptions()  # the defaults, defined once there
DEFAULT_EMOTION = tuple(getattr(_PUBLISHED, f"emotion_{n}") for n in EMOTIONS)


@dataclass(frozen=True)
class ZonosConditioning:
    """emotion: 8 weights in [0, 1] (EMOTIONS order; normalised to sum 1 as Zonos does);
    fmax: the highest frequency in Hz, 0-24000 (22050 for 44.1 kHz audio and for cloning);
    pitch_std: pitch variation, 0-400 (20-45 normal speech, 60-150 expressive);
    speaking_rate: phonemes per second scale, 0-40 (10 slow, 15 normal, 30 very fast);
    language: an eSpeak voice code (phonemes.LANGUAGES)."""

    emotion: tuple[float, ...] = DEFAULT_EMOTION
    fmax: float = _PUBLISHED.fmax
    pitch_std: float = _PUBLISHED.pitch_std
    speaking_rate: float = _PUBLISHED.speaking_rate
    language: str = _PUBLISHED.language

    def __post_init__(self) -> None:
        emotion = tuple(float(e) for e in self.emotion)
        if len(emotion) != len(EMOTIONS) or not all(0.0 <= e <= 1.0 for e in emotion):
            raise ModelInputError(
                f"emotion must be {len(EMOTIONS)} weights in [0, 1] ({', '.join(EMOTIONS)})"
            )
        if sum(emotion) <= 0.0:
            raise ModelInputError("emotion weights must not all be 0")
        object.__setattr__(self, "emotion", emotion)
        for name, top in (("fmax", 24000.0), ("pitch_std", 400.0), ("speaking_rate", 40.0)):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and 0.0 <= value <= top):
                raise ModelInputError(f"{name} must be between 0 and {top:g}, got {value}")
            object.__setattr__(self, name, value)
        language_id(self.language)

    @property
    def language_id(self) -> int:
        return language_id(self.language)

    @property
    def normalised_emotion(self) -> tuple[float, ...]:
        total = sum(self.emotion)
        return tuple(e / total for e in self.emotion)

    @classmethod
    def from_request(cls, given: Mapping[str, Any] | None) -> ZonosConditioning:
        """A request's options (name → value) over the defaults; unknown names are refused."""
        given = dict(given or {})
        known = {f.name for f in fields(cls)} | {f"emotion_{n}" for n in EMOTIONS}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ModelInputError(
                f"Zonos takes no option {', '.join(unknown)}; its options: {', '.join(sorted(known))}"
            )
        flat = {n: given.pop(f"emotion_{n}") for n in EMOTIONS if f"emotion_{n}" in given}
        if flat:
            if "emotion" in given:
                raise ModelInputError("give the emotion as `emotion` or as emotion_* weights")
            defaults = dict(zip(EMOTIONS, DEFAULT_EMOTION, strict=True))
            given["emotion"] = tuple(flat.get(n, defaults[n]) for n in EMOTIONS)
        if "emotion" in given and isinstance(given["emotion"], Mapping):
            named = given["emotion"]
            bad = sorted(set(named) - set(EMOTIONS))
            if bad:
                raise ModelInputError(
                    f"unknown emotion {', '.join(bad)}; use {', '.join(EMOTIONS)}"
                )
            given["emotion"] = tuple(float(named.get(e, 0.0)) for e in EMOTIONS)
        try:
            return cls(**given)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ModelInputError):
                raise
            raise ModelInputError(f"bad Zonos option: {exc}") from None
