"""Chatterbox's CAM++ speaker encoder (models/chatterbox/campplus.py) against the official
`CAMPPlus` (chatterbox-tts, `make reference-deps`; its file imports torchaudio's Kaldi fbank
at the top, which the reference install leaves out: a bare module stands in, never called)
at its published sizes with the same seeded random weights and batch-norm statistics, fp32
on the CPU: the same x-vector from the same fbank features. The weights are saved with the
published names under `speaker_encoder.` and read back by Voxgate's loader, which reads the
sizes off them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from official_chatterbox import import_with_stand_ins, seeded

from models.chatterbox.campplus import CamSizes, cam_sizes, load_campplus
from models.checkpoint_errors import CheckpointError
from models.cosyvoice2.features import kaldi_fbank

KALDI = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")


@pytest.fixture(scope="module")
def official():
    xvector = import_with_stand_ins("chatterbox.models.s3gen.xvector", KALDI)
    model = seeded(xvector.CAMPPlus(memory_efficient=False), 61, scale=0.1)
    g = torch.Generator().manual_seed(62)
    with torch.no_grad():  # batch norms with statistics of their own
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model.eval()


@pytest.fixture(scope="module")
def state(official):
    return {f"speaker_encoder.{k}": v.clone() for k, v in official.state_dict().items()}


def test_sizes_are_the_published(state):
    assert cam_sizes(state) == CamSizes()


def test_xvector_equals_the_official(official, state):
    """3.5 s: 175 frames after the TDNN's stride, past one of CAM's 100-frame segments."""
    seconds = 3.5
    ours = load_campplus(state)
    rng = np.random.default_rng(int(seconds * 10))
    t = np.arange(int(16000 * seconds)) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 150 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    feats = torch.from_numpy(kaldi_fbank(audio))[None]
    with torch.no_grad():
        want = official(feats)[0]
    got = ours.embed_clip(audio)
    assert got.shape == (192,)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_missing_tensor_is_named(state):
    broken = {k: v for k, v in state.items() if "transit2.linear" not in k}
    with pytest.raises(CheckpointError, match="transit2.linear"):
        load_campplus(broken)
