"""Chatterbox's voice encoder (models/chatterbox/voice_encoder.py) against the official
`VoiceEncoder` (`make reference-deps`) with the same seeded random weights, fp32 on the CPU:
the embedding of an utterance's mels (the LSTM, the projection, the 160-frame windows every
77 frames, their mean) must agree within float32 rounding. The official module imports
librosa at the top, for its mels and trim, which the reference install leaves out (it needs
numba); the comparison starts from mels, so a bare stand-in module satisfies the import."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from official_chatterbox import import_with_stand_ins, seeded
from safetensors.torch import load_file, save_file

from models.chatterbox.voice_encoder import (
    PARTIAL_FRAMES,
    VoiceEncoder,
    frame_step,
    load_voice_encoder,
    partial_windows,
    power_mels,
    trim_silence,
)
from models.checkpoint_errors import CheckpointError


@pytest.fixture(scope="module")
def official_ve():
    module = import_with_stand_ins("chatterbox.models.voice_encoder.voice_encoder", ("librosa",))
    return seeded(module.VoiceEncoder(), 41, scale=0.2)


@pytest.fixture(scope="module")
def ours(official_ve, tmp_path_factory):
    """The official weights saved as ve.safetensors and read by Voxgate's loader."""
    path = tmp_path_factory.mktemp("ve") / "ve.safetensors"
    save_file({k: v.contiguous() for k, v in official_ve.state_dict().items()}, str(path))
    return load_voice_encoder(load_file(str(path)))


@pytest.mark.parametrize("frames", [90, 160, 301, 555])
def test_embedding_of_mels_equals_the_official(official_ve, ours, frames):
    mel = torch.rand(frames, 40, generator=torch.Generator().manual_seed(frames)) * 3.0
    want = official_ve.embeds_from_mels([mel.numpy()], rate=1.3)[0]
    got = ours.embed_mels(mel)
    assert got.shape == (256,)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-5)
    assert abs(float(torch.linalg.norm(got)) - 1.0) < 1e-5


def test_windows_follow_the_packages_rule():
    step = frame_step()
    assert step == 77
    assert partial_windows(torch.zeros(90, 40)).shape == (1, PARTIAL_FRAMES, 40)
    # 301 frames: windows at 0, 77 (ends 237), and one more at 154 (ends 314: 147 of its 160
    # frames real, above the 80 % coverage).
    assert partial_windows(torch.zeros(301, 40)).shape == (3, PARTIAL_FRAMES, 40)


def test_clip_features_have_the_packages_shape_and_trim():
    t = np.arange(16000 * 2) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    silence = np.zeros(16000, dtype=np.float32)
    clip = np.concatenate([silence, tone, silence])
    trimmed = trim_silence(clip)
    # librosa.effects.trim's frames: the loud part, give or take a frame each side.
    assert abs(len(trimmed) - len(tone)) <= 2 * 2048
    mels = power_mels(trimmed)
    assert mels.shape == (1 + len(trimmed) // 160, 40)
    assert mels.dtype == np.float32 and mels.min() >= 0
    assert trim_silence(silence).size == 0


def test_loader_names_a_missing_tensor(official_ve):
    state = {k: v for k, v in official_ve.state_dict().items() if k != "proj.bias"}
    with pytest.raises(CheckpointError, match="proj.bias"):
        load_voice_encoder(state)


def test_silent_clip_is_refused():
    with pytest.raises(ValueError, match="silent"):
        VoiceEncoder().embed_clip(np.zeros(16000, dtype=np.float32))
