"""Chatterbox's S3 speech tokenizer (models/chatterbox/s3_tokenizer.py) against the official
`s3tokenizer` package's S3TokenizerV2 (`make reference-deps`; its audio helpers' imports of
onnx and torchaudio stand in as bare modules, never called) with the same seeded random
weights, fp32 on the CPU: the same tokens from the same log-mel. The weights are saved with
the published names under `tokenizer.` and read back by Voxgate's loader. Sizes: the
published 64-wide heads (the rotary table is fixed at 64), 2 heads, 2 layers.

Tokens are a rounding of tanh'd projections: a value within float rounding of a rounding
boundary could flip a digit, so the test counts agreement and asserts every token equal
(none came near a boundary with these weights; a flip would show as a near-miss count)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from official_chatterbox import import_with_stand_ins, seeded

from models.chatterbox.s3_tokenizer import load_s3_tokenizer, tokenizer_sizes
from models.checkpoint_errors import CheckpointError
from models.cosyvoice2.features import whisper_log_mel


@pytest.fixture(scope="module")
def official():
    v2 = import_with_stand_ins("s3tokenizer.model_v2", ("onnx", "torchaudio"))
    config = v2.ModelConfig(n_audio_state=128, n_audio_head=2, n_audio_layer=2)
    model = v2.S3TokenizerV2("speech_tokenizer_v2_25hz", config)
    seeded(model, 51, scale=0.1)
    with torch.no_grad():  # digits spread over {0, 1, 2}
        model.quantizer._codebook.project_down.weight.mul_(10.0)
    return model


@pytest.fixture(scope="module")
def ours(official):
    state = {f"tokenizer.{k}": v.clone() for k, v in official.state_dict().items()}
    state["tokenizer._mel_filters"] = torch.zeros(128, 201)  # published, recomputed, unused
    return load_s3_tokenizer(state)


@pytest.mark.parametrize("seconds", [1.0, 2.3])
def test_tokens_of_speech_equal_the_official(official, ours, seconds):
    g = np.random.default_rng(int(seconds * 10))
    t = np.arange(int(16000 * seconds)) / 16000
    audio = 0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.3 * t)) + 0.05 * g.standard_normal(t.size)
    mel = torch.from_numpy(whisper_log_mel(audio.astype(np.float32)))
    want, want_len = official.quantize(mel[None], torch.tensor([mel.shape[1]]))
    got = ours.tokens(audio.astype(np.float32))
    assert len(got) == int(want_len[0]) == -(-mel.shape[1] // 4)
    assert len(set(got)) > 3  # the quantiser's digits vary
    assert got == want[0].tolist()
    assert all(0 <= c < 6561 for c in got)


def test_max_tokens_cuts_the_whole_clips_mel(ours):
    """As the package's max_len: the log-mel of the whole clip (its level set by the whole
    clip's peak), cut to 4 frames a token, then encoded."""
    audio = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1
    mel = torch.from_numpy(whisper_log_mel(audio))
    got = ours.tokens(audio, max_tokens=10)
    assert len(got) == 10
    assert got == ours.tokens_of_mel(mel[:, :40])


def test_sizes_and_a_missing_tensor(official):
    state = {f"tokenizer.{k}": v for k, v in official.state_dict().items()}
    sizes = tokenizer_sizes(state)
    assert (sizes.width, sizes.heads, sizes.layers) == (128, 2, 2)
    del state["tokenizer.encoder.blocks.1.attn.fsmn_block.weight"]
    with pytest.raises(CheckpointError, match="fsmn_block"):
        load_s3_tokenizer(state)


def test_over_30_seconds_is_refused(ours):
    with pytest.raises(ValueError, match="30 s"):
        ours.tokens_of_mel(torch.zeros(128, 3001))
