"""Chatterbox's S3Gen against the official package (`chatterbox-tts`, `make reference-deps`):
seeded random weights in the official flow and HiFT, saved as s3gen.safetensors (with the
voice-from-clip tensors the published file also holds) and loaded through Voxgate's loader;
the audio of the same tokens and voice must agree within float32 rounding, fp32 on the CPU.

The official decode is S3Token2Wav.inference's three steps on the official modules (its
class itself needs torchaudio and the S3 tokenizer package, which the reference install
leaves out): the flow's final decode, HiFT, the 40 ms fade-in. Its random draws (flow noise,
HiFT's harmonic phases and noise) are Voxgate's deterministic ones (official_chatterbox.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from official_s3gen import SIZES, official_and_ours, official_decode, official_s3gen_parts, voice
from safetensors.torch import load_file

from models.chatterbox.s3gen import load_s3gen, s3gen_sizes
from models.checkpoint_errors import CheckpointError


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return official_and_ours(31, tmp_path_factory.mktemp("s3gen"))


def test_sizes_read_off_the_checkpoint(pair):
    _, _, state = pair
    assert s3gen_sizes(state) == SIZES


@pytest.mark.parametrize(("seed", "n"), [(1, 25), (2, 48)])
def test_audio_of_the_same_tokens_matches_official_decode(pair, seed, n):
    (flow, hift), ours, _ = pair
    v = voice(seed + 10)
    tokens = torch.randint(0, 6561, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    mel_expected, expected = official_decode(flow, hift, tokens, v, ours.flow.noise)
    torch.testing.assert_close(ours.mel(tokens, v), mel_expected, atol=1e-4, rtol=1e-4)
    got = ours.decode(tokens, v)
    assert got.shape == expected.shape == (n * 2 * 480,)
    assert np.abs(expected[960:]).mean() > 1e-3
    assert np.all(got[:480] == 0)  # the fade-in's silence
    # fp32 rounding, which grows with the clip: the official excitation's phase is a float32
    # running sum over the samples (Voxgate's float64), and HiFT, whose audio follows its mel
    # (audible_hift), carries it and the mel's 1e-4 on. Measured: 6e-4 of the RMS at 1 s,
    # 2e-3 at 2 s, the same with HiFT run on the official mel.
    rms = np.sqrt(np.mean(expected**2))
    np.testing.assert_allclose(got, expected, atol=5e-3 * rms)


def test_tokens_past_the_codes_are_dropped(pair):
    """T3's special tokens (start/stop speech, 6561+) never reach the flow, as generate drops
    them; a decode of only those is refused with a clear error."""
    _, ours, _ = pair
    v = voice(3)
    tokens = torch.randint(0, 6561, (20,), generator=torch.Generator().manual_seed(3)).tolist()
    np.testing.assert_array_equal(ours.decode(tokens + [6561, 6562], v), ours.decode(tokens, v))
    with pytest.raises(ValueError, match="no speech tokens"):
        ours.decode([6562], v)


def test_loader_names_a_missing_tensor(pair):
    _, _, state = pair
    broken = {k: v for k, v in state.items() if k != "flow.encoder_proj.weight"}
    with pytest.raises(CheckpointError, match="encoder_proj"):
        load_s3gen(broken)


def test_tiny_preset_uses_the_official_names(tmp_path):
    """The tiny preset's s3gen.safetensors holds exactly the official flow's and HiFT's tensor
    names at its depths (other widths), and the clip encoders' names are the official S3
    tokenizer's and CAM++'s (fewer layers: a subset)."""
    from official_chatterbox import import_with_stand_ins

    from models.chatterbox.presets import ensure_tiny_chatterbox

    flow, hift = official_s3gen_parts(1)
    official = {f"flow.{k}" for k in flow.state_dict()} | {
        f"mel2wav.{k}" for k in hift.state_dict()
    }
    names = set(load_file(str(ensure_tiny_chatterbox(tmp_path) / "s3gen.safetensors")))
    assert {n for n in names if n.startswith(("flow.", "mel2wav."))} == official
    v2 = import_with_stand_ins("s3tokenizer.model_v2", ("onnx", "torchaudio"))
    xvector = import_with_stand_ins(
        "chatterbox.models.s3gen.xvector",
        ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"),
    )
    tokenizer = {
        f"tokenizer.{k}" for k in v2.S3TokenizerV2("speech_tokenizer_v2_25hz").state_dict()
    }
    campplus = {f"speaker_encoder.{k}" for k in xvector.CAMPPlus().state_dict()}
    clip = {n for n in names if n.startswith(("tokenizer.", "speaker_encoder."))}
    assert clip and clip <= tokenizer | campplus
    assert names == official | clip
