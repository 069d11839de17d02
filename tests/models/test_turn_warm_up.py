"""The engine's warm-up runs a turn-based model's audio-input stage once (Step-Audio 2's mel
and encoder + adapter, GLM-4-Voice's speech tokenizer), so the first user turn's reply does not
wait for that stage's first-use costs."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from models.registry import load_model
from tests.models.engine_run import SPOKEN_TURNS

# Where each preset's audio-input stage is called: (attribute of the model, method).
AUDIO_STAGE = {
    "tiny-step-audio2": ("audio_input", "embed_turns"),
    "tiny-glm-voice": ("speech_tokenizer", "encode"),
}


@pytest.mark.parametrize("name", SPOKEN_TURNS)
def test_engine_warm_up_runs_the_audio_input_stage(name, monkeypatch):
    model = load_model(name)
    owner, method = AUDIO_STAGE[name]
    stage = getattr(model, owner)
    real, calls = getattr(stage, method), []

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(stage, method, counted)
    config = EngineConfig(
        max_num_seqs=2, max_batch_tokens=64, num_kv_blocks=64, block_size=16,
        realtime_admission=False,
    )  # fmt: skip
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    assert not calls
    core.warm_up()
    assert len(calls) == 1
    assert not core.has_work()
