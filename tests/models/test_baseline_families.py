"""voxbench's per-request baselines (voxbench/baselines.py) are chosen by the model's family:
a model of a family without one is refused before anything loads, naming those with one."""

from __future__ import annotations

import pytest

from models.checkpoint_errors import CheckpointError
from models.families import FAMILIES
from voxbench.baselines import BASELINES, baseline_family, load_baseline


def test_the_baseline_families_are_in_the_table():
    assert set(BASELINES) <= {f.name for f in FAMILIES}


@pytest.mark.parametrize(
    "model",
    [
        "tiny-orpheus",
        "orpheus-3b",
        "tiny-cosyvoice2",
        "tiny-qwen3-tts",
        "qwen3-tts-1.7b",
        "tiny-zonos",
        "tiny-chatterbox",
        "chatterbox",
    ],
)
def test_the_baseline_families_models_have_one(model):
    assert baseline_family(model) in BASELINES


@pytest.mark.parametrize("model", ["tiny-csm", "voxgate-tiny", "tiny-moshi"])
def test_another_familys_model_is_refused_naming_those_with_one(model):
    with pytest.raises(CheckpointError) as err:
        load_baseline(model, "cpu")
    message = str(err.value)
    assert "has no per-request baseline" in message and "not Orpheus" not in message
    assert "CosyVoice 2 (tiny-cosyvoice2, cosyvoice2-0.5b)" in message
    assert "Orpheus (tiny-orpheus, orpheus-3b)" in message
    assert "Qwen3-TTS (tiny-qwen3-tts, qwen3-tts-0.6b" in message


def test_the_orpheus_baseline_refuses_random_weights_as_the_engine_does():
    """tiny-orpheus is seeded random weights already: the baseline refuses --random-weights
    for it as `voxgate serve` does (models/load_checks.py), before anything loads."""
    with pytest.raises(ValueError, match="tiny-orpheus is random already"):
        load_baseline("tiny-orpheus", "cpu", random_weights=True)
