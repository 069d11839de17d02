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


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _clip(seconds: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
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
    import av

    from models.zonos.phonemes import espeak_available

    if not espeak_available():
        pytest.skip("Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`")
    monkeypatch.setenv("VOXGATE_CACHE", str(tmp_path / "cache"))
    voices = tmp_path / "voices"
    voices.mkdir()
    with av.open(str(voices / "anna.wav"), "w") as out:
        stream = out.add_stream("pcm_s16le", rate=SAMPLE_RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(
            (_clip() * 32767).astype(np.int16)[None], format="s16", layout="mono"
        )
        frame.sample_rate = SAMPLE_RATE
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    from models.registry import load_model

    model = load_model("tiny-zonos", device="cpu", voices_dir=str(voices))
    assert model.facts.voices == ("default", "anna") and model.facts.clip_voices == ("anna",)
    speaker = model.voices["anna"]
    assert len(speaker) == 128 and np.isfinite(speaker).all()
    prompt = model.preprocess("Hello.", "anna").token_ids
    assert prompt != model.preprocess("Hello.", None).token_ids
