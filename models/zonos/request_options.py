"""Zonos' per-request options as the generic per-request options path declares them: a frozen
dataclass of numbers, each with its published default, range and help (the field metadata of
`models.request_options.request_option`: minimum, maximum, help), that a family hands to
ModelFamily.request_options and its model announces as ModelFacts.request_options. The engine
then hands each request's values, checked and completed, to
ZonosModel.preprocess_with_options, which turns them into ZonosOptions (options.py).

The emotion vector travels as its 8 named weights; the language is a string and has no place
among numeric options, so requests are phonemized as `en-us` (ZonosOptions.language) until
the path carries text-valued options. Light: no torch at import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _option(default: float, minimum: float, maximum: float, help: str) -> Any:
    return field(default=default, metadata={"minimum": minimum, "maximum": maximum, "help": help})


def _emotion(default: float, name: str) -> Any:
    return _option(default, 0.0, 1.0, f"weight of {name} in the emotion vector (normalised)")


@dataclass(frozen=True)
class ZonosRequestOptions:
    """Defaults: the official make_cond_dict's."""

    emotion_happiness: float = _emotion(0.3077, "happiness")
    emotion_sadness: float = _emotion(0.0256, "sadness")
    emotion_disgust: float = _emotion(0.0256, "disgust")
    emotion_fear: float = _emotion(0.0256, "fear")
    emotion_surprise: float = _emotion(0.0256, "surprise")
    emotion_anger: float = _emotion(0.0256, "anger")
    emotion_other: float = _emotion(0.2564, "other")
    emotion_neutral: float = _emotion(0.3077, "neutral")
    fmax: float = _option(
        22050.0, 0.0, 24000.0, "highest frequency in Hz: 22050 for 44.1 kHz audio and cloning"
    )
    pitch_std: float = _option(
        20.0, 0.0, 400.0, "pitch variation: 20-45 normal speech, 60-150 expressive"
    )
    speaking_rate: float = _option(15.0, 0.0, 40.0, "speaking rate: 10 slow, 15 normal, 30 fast")
