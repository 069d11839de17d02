"""Every tiny preset of random weights makes audio that follows its tokens and stays within
[-1, 1]. Random weights drawn by a training initialiser can leave a codec deaf (transformers'
DAC decoded unrelated codes within 0.1 % of each other, HiFT within 1 %) or loud (Mimi's audio
spread by ~5, clipped over 80 % of its samples): tests comparing audio then cannot fail, or
compare clipping. Two requests of unrelated tokens, through the engine, must sound apart and
neither may clip (models/codecs/audible_weights.py; measured: 10 % apart for tiny-step-audio2
at the least)."""

from __future__ import annotations

import numpy as np
import pytest

from models.registry import load_model
from tests.models.engine_run import SPOKEN_TURNS, TEXT_TO_SPEECH, generated

RANDOM_WEIGHTS = [name for name in TEXT_TO_SPEECH + SPOKEN_TURNS if name != "voxgate-tiny"]


@pytest.mark.parametrize("name", RANDOM_WEIGHTS)
def test_unrelated_replies_sound_apart_and_do_not_clip(name):
    model = load_model(name)
    n = int(1.0 / model.facts.seconds_per_token)
    _, first, a = generated(model, n, seed=1, text="A first sentence to say.")
    _, second, b = generated(model, n, seed=2, text="Something else entirely!")
    assert first.output_ids != second.output_ids
    k = min(len(a), len(b))
    assert k > 0.25 * model.facts.sample_rate  # a turn model's replies interleave text
    rms = float(np.sqrt(np.mean(a[:k] ** 2)))
    apart = float(np.sqrt(np.mean((a[:k] - b[:k]) ** 2)))
    assert apart > 0.05 * rms, f"unrelated tokens decode within {apart / rms:.2%}"
    assert rms > 0.01 and max(np.abs(a).max(), np.abs(b).max()) <= 1.0
