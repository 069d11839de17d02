"""The three features CosyVoice 2's frontend computes from a reference clip, with the published
settings: Whisper's 128-bin log-mel (speech tokenizer input, 16 kHz), Kaldi fbank (CAM++ input,
16 kHz) and Matcha's 80-bin log-mel at 24 kHz (the flow's prompt mel). The filter banks and
framing come from transformers.audio_utils."""

from __future__ import annotations

import functools

import numpy as np
import torch


@functools.cache
def _whisper_filters(n_mels: int) -> torch.Tensor:
    """Whisper's slaney mel filters [n_mels, 201], made once per process: a spoken turn's
    features (Step-Audio 2) must not wait for the import and the filter bank each time."""
    from transformers.audio_utils import mel_filter_bank

    filters = mel_filter_bank(
        num_frequency_bins=201,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
    )  # [201, n_mels]
    return torch.from_numpy(filters.T.astype(np.float32))


def whisper_log_mel(audio16k: np.ndarray, n_mels: int = 128) -> np.ndarray:
    """whisper.log_mel_spectrogram: [n_mels, frames] float32."""
    x = torch.from_numpy(np.asarray(audio16k, dtype=np.float32))
    spec = torch.stft(x, 400, 160, window=torch.hann_window(400), return_complex=True)
    power = spec[:, :-1].abs() ** 2  # Whisper drops the last frame
    mel = _whisper_filters(n_mels) @ power
    log = torch.clamp(mel, min=1e-10).log10()
    log = torch.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).numpy()


def kaldi_fbank(audio16k: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """torchaudio.compliance.kaldi.fbank(dither=0) minus its mean over time: [frames, n_mels]."""
    from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

    filters = mel_filter_bank(
        num_frequency_bins=257,
        num_mel_filters=n_mels,
        min_frequency=20.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm=None,
        mel_scale="kaldi",
        triangularize_in_mel_space=True,
    )
    feats = spectrogram(
        np.asarray(audio16k, dtype=np.float32),
        window_function(400, "povey", periodic=False),
        frame_length=400,
        hop_length=160,
        fft_length=512,
        power=2.0,
        center=False,
        preemphasis=0.97,
        mel_filters=filters,
        log_mel="log",
        mel_floor=1.192092955078125e-07,
        remove_dc_offset=True,
    ).T  # [frames, n_mels]
    return (feats - feats.mean(axis=0, keepdims=True)).astype(np.float32)


def prompt_mel(audio24k: np.ndarray, n_mels: int = 80, fmax: float = 12000.0) -> np.ndarray:
    """matcha.utils.audio.mel_spectrogram(n_fft=1920, hop=480, win=1920, fmin=0, fmax=None,
    center=False): [frames, n_mels], natural log clamped at 1e-5. `fmax`: the filters' top
    (CosyVoice 2: none, so 12 kHz; Chatterbox's S3Gen: 8 kHz)."""
    from transformers.audio_utils import mel_filter_bank

    n_fft, hop = 1920, 480
    filters = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=fmax,
        sampling_rate=24000,
        norm="slaney",
        mel_scale="slaney",
    )
    x = torch.from_numpy(np.asarray(audio24k, dtype=np.float32))[None, None]
    pad = (n_fft - hop) // 2
    x = torch.nn.functional.pad(x, (pad, pad), mode="reflect")[0, 0]
    spec = torch.stft(
        x, n_fft, hop, window=torch.hann_window(n_fft), center=False, return_complex=True
    )
    magnitude = torch.sqrt(spec.real**2 + spec.imag**2 + 1e-9)
    mel = torch.from_numpy(filters.T.astype(np.float32)) @ magnitude
    return torch.clamp(mel, min=1e-5).log().T.contiguous().numpy()
