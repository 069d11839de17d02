"""Zonos' speaker model (models/zonos/speaker.py): its features equal transformers' log-mel
spectrogram (an independent implementation of the same STFT and HTK filters), its network equals
the official ResNet293_based on the same random weights (narrowed to 4 channels a stage, the
published block counts), and a clip in `--voices-dir` becomes a served voice of tiny-zonos."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.zonos.speaker import (
    HOP,
    N_FFT,
    N_MELS,
    SAMPLE_RATE,
    WINDOW,
    LogMel,
    load_speaker_model,
    write_speaker_model,
)
from tests.torch_threads import one_torch_thread


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


def _clip(seconds: float = 1.0, rate: int = SAMPLE_RATE) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )


def test_features_equal_transformers_log_mel():
    from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

    wav = _clip()
    filters = mel_filter_bank(N_FFT // 2 + 1, N_MELS, 0.0, SAMPLE_RATE / 2, SAMPLE_RATE,
                              norm=None, mel_scale="htk")  # fmt: skip
    window = window_function(WINDOW, "hann", frame_length=N_FFT)
    power = spectrogram(wav.astype(np.float64), window, N_FFT, HOP, N_FFT, power=2.0,
                        mel_filters=filters, mel_floor=1e-30)  # fmt: skip
    want = np.log(power + 1e-6)
    want -= want.mean(axis=1, keepdims=True)
    got = LogMel()(torch.from_numpy(wav)[None])[0].numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_network_equals_the_official(tmp_path):
    from tests.models.official_zonos import import_official

    import_official()
    from zonos.speaker_cloning import ResNet293_based

    write_speaker_model(tmp_path, width=4, seed=0)
    mine = load_speaker_model(tmp_path, torch.device("cpu"))
    official = ResNet293_based(in_planes=4, featCal=torch.nn.Identity()).eval()
    state = torch.load(tmp_path / "ResNet293_SimAM_ASP_base.pt", weights_only=True)
    official.load_state_dict(state)
    mel = mine.features(torch.from_numpy(_clip())[None])
    with torch.inference_mode():
        torch.testing.assert_close(mine.network(mel), official(mel), rtol=1e-5, atol=1e-5)


def test_a_clip_becomes_a_served_voice(tmp_path, monkeypatch):
    """A --voices-dir clip becomes a listed voice; the same clip from a client (decoded and
    checked as the gateway does, add_clip_voice) gives the same prompt, unlisted, until it is
    removed. The clip is at 24 kHz: both paths resample it to the speaker model's 16 kHz."""
    from gateway.clip_audio import read_clip
    from models.base import ModelInputError
    from models.zonos.phonemes import espeak_available

    if not espeak_available():
        pytest.skip("Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`")
    monkeypatch.setenv("VOXGATE_CACHE", str(tmp_path / "cache"))
    voices = tmp_path / "voices"
    voices.mkdir()
    wav = _wav_bytes(_clip(2.5, 24000), 24000)
    (voices / "anna.wav").write_bytes(wav)
    from models.registry import load_model

    model = load_model("tiny-zonos", device="cpu", voices_dir=str(voices))
    assert model.facts.voices == ("default", "anna") and model.facts.clip_voices == ("anna",)
    speaker = model.voices["anna"]
    assert len(speaker) == 128 and np.isfinite(speaker).all()
    prompt = model.preprocess("Hello.", "anna").token_ids
    assert prompt != model.preprocess("Hello.", None).token_ids

    facts = model.facts
    assert facts.voice_cloning and not facts.clip_rules.needs_transcript
    clip = read_clip(wav, "", facts, 2**20)
    assert clip.sample_rate == 24000
    assert model.add_clip_voice("clip-0123", clip) == 128 * 4  # its embedding, float32
    assert model.preprocess("Hello.", "clip-0123").token_ids == prompt
    assert model.facts.voices == ("default", "anna")  # a client's voice is not listed
    with pytest.raises(ModelInputError, match="taken"):
        model.add_clip_voice("anna", clip)
    model.remove_clip_voice("clip-0123")
    with pytest.raises(ModelInputError, match="unknown voice 'clip-0123'"):
        model.preprocess("Hello.", "clip-0123")
    # Without its speaker model (no speaker/ folder beside the weights) Zonos cannot clone,
    # and says so: the gateway refuses clients' clips with cloning_unsupported.
    from models.zonos.model import ZonosModel

    bare = ZonosModel(model.weights, model.detok, name="bare")
    assert not bare.facts.voice_cloning
    with pytest.raises(ModelInputError, match="no speaker model"):
        bare.add_clip_voice("clip-0123", clip)


def _wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    import io
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((audio * 32767).astype("<i2").tobytes())
    return out.getvalue()
