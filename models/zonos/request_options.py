"""Zonos' per-request options as the generic per-request options path declares them: a frozen
dataclass of numbers (`models.request_options.request_option`: published default, range and
help) and the language (`text_option`, one of the eSpeak codes Zonos speaks), that the family
hands to ModelFamily.request_options and its model announces as ModelFacts.request_options.
The engine then hands each request's values, checked and completed, to
ZonosModel.preprocess_with_options, which turns them into ZonosConditioning (options.py).

The emotion vector travels as its 8 named weights. Light: no torch at import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.request_options import request_option, text_option
from models.zonos.languages import SPOKEN, UNAVAILABLE


def _emotion(default: float, name: str) -> Any:
    return request_option(default, 0.0, 1.0, f"weight of {name} in the emotion vector (normalised)")


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
    fmax: float = request_option(
        22050.0, 0.0, 24000.0, "highest frequency in Hz: 22050 for 44.1 kHz audio and cloning"
    )
    pitch_std: float = request_option(
        20.0, 0.0, 400.0, "pitch variation: 20-45 normal speech, 60-150 expressive"
    )
    speaking_rate: float = request_option(
        15.0, 0.0, 40.0, "speaking rate: 10 slow, 15 normal, 30 fast"
    )
    language: str = text_option(
        "en-us",
        choices=SPOKEN,
        help="the text's language as an eSpeak code (en-us, en-gb, de, fr-fr, es, cmn, …); "
        f"not ja: {UNAVAILABLE['ja']}",
    )
