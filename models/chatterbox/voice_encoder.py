"""Chatterbox's voice encoder (`ve.safetensors`): a reference clip → T3's 256-value speaker
embedding, as the official `VoiceEncoder.embeds_from_wavs` computes it.

The clip (16 kHz) has its leading and trailing silence trimmed (librosa.effects.trim,
top_db 20), is turned into 40-bin power mels (n_fft 400, hop 160, Slaney mel scale and
norm, 0-8 kHz, centred reflect-padded frames: VoiceEncConfig with mel_type "amp"), cut into
windows of 160 frames every 77 frames (rate 1.3 a second, the package's default; the last
window zero-padded when it covers at least 80 % of its frames), each window through a
3-layer LSTM, the last layer's final hidden state projected to 256 values, ReLU'd and
L2-normalised; the windows' mean, L2-normalised again, is the embedding.

tests/models/test_chatterbox_voices.py compares the network and the windowing with the
official module (same random weights, fp32 on the CPU). The mels and the trim are written
from the package's settings and not compared there (librosa, which the package computes them
with, needs numba, which the reference install leaves out)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import check_state_dict

SAMPLE_RATE = 16000
N_MELS = 40
HIDDEN = 256
EMBED = 256
N_FFT = 400
HOP = 160
PARTIAL_FRAMES = 160  # ve_partial_frames
RATE = 1.3  # partial windows a second (embeds_from_wavs' default)
MIN_COVERAGE = 0.8
TRIM_TOP_DB = 20.0
TRIM_FRAME, TRIM_HOP = 2048, 512  # librosa.effects.trim's frame_length, hop_length


class VoiceEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, HIDDEN, num_layers=3, batch_first=True)
        self.proj = nn.Linear(HIDDEN, EMBED)
        # Trained with the embeddings (GE2E's similarity scale); unused at inference.
        self.similarity_weight = nn.Parameter(torch.tensor([10.0]))
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0]))

    def forward(self, partials: torch.Tensor) -> torch.Tensor:
        """partials [B, 160, 40] → L2-normalised embeddings [B, 256]."""
        _, (hidden, _) = self.lstm(partials)
        raw = F.relu(self.proj(hidden[-1]))
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)

    @torch.inference_mode()
    def embed_mels(self, mel: torch.Tensor) -> torch.Tensor:
        """One utterance's mels [T, 40] → its embedding [256] (VoiceEncoder.inference)."""
        partials = partial_windows(mel.float())
        device = self.proj.weight.device
        mean = self(partials.to(device)).float().mean(dim=0)
        return (mean / torch.linalg.norm(mean)).cpu()

    def embed_clip(self, audio16k: np.ndarray) -> torch.Tensor:
        """A reference clip at 16 kHz → T3's speaker embedding [256]."""
        trimmed = trim_silence(np.asarray(audio16k, dtype=np.float32))
        if len(trimmed) < HOP:
            raise ValueError("the reference clip is silent: the voice encoder needs speech")
        return self.embed_mels(torch.from_numpy(power_mels(trimmed)))


def frame_step() -> int:
    """Frames between partial windows at RATE windows a second (get_frame_step)."""
    return int(np.round((SAMPLE_RATE / RATE) / PARTIAL_FRAMES))


def partial_windows(mel: torch.Tensor) -> torch.Tensor:
    """mel [T, 40] → the windows the package embeds [N, 160, 40] (get_num_wins, zero-padded
    or cut to the frames they cover)."""
    step, n = frame_step(), mel.shape[0]
    if n == 0:
        raise ValueError("no mel frames to embed")
    wins, remainder = divmod(max(n - PARTIAL_FRAMES + step, 0), step)
    if wins == 0 or (remainder + (PARTIAL_FRAMES - step)) / PARTIAL_FRAMES >= MIN_COVERAGE:
        wins += 1
    target = PARTIAL_FRAMES + step * (wins - 1)
    mel = F.pad(mel, (0, 0, 0, target - n)) if target > n else mel[:target]
    return torch.stack([mel[i * step : i * step + PARTIAL_FRAMES] for i in range(wins)])


def power_mels(audio16k: np.ndarray) -> np.ndarray:
    """melspectrogram(wav, VoiceEncConfig) transposed: [1 + len // 160, 40] float32."""
    from transformers.audio_utils import mel_filter_bank

    filters = mel_filter_bank(
        num_frequency_bins=N_FFT // 2 + 1,
        num_mel_filters=N_MELS,
        min_frequency=0.0,
        max_frequency=SAMPLE_RATE / 2,
        sampling_rate=SAMPLE_RATE,
        norm="slaney",
        mel_scale="slaney",
    )  # [201, 40]
    x = torch.from_numpy(np.asarray(audio16k, dtype=np.float32))
    spec = torch.stft(
        x,
        N_FFT,
        HOP,
        window=torch.hann_window(N_FFT),
        center=True,
        pad_mode="reflect",
        return_complex=True,
    )
    power = spec.abs() ** 2  # [201, T]
    mel = torch.from_numpy(filters.T.astype(np.float32)) @ power
    return mel.T.contiguous().numpy()


def trim_silence(audio: np.ndarray, top_db: float = TRIM_TOP_DB) -> np.ndarray:
    """librosa.effects.trim: drop the leading and trailing frames whose RMS is more than
    `top_db` below the loudest frame's (2048-sample frames every 512, centred, zero-padded)."""
    if len(audio) == 0:
        return audio
    padded = np.pad(audio, TRIM_FRAME // 2)
    frames = 1 + (len(padded) - TRIM_FRAME) // TRIM_HOP
    index = np.arange(TRIM_FRAME)[None, :] + TRIM_HOP * np.arange(frames)[:, None]
    power = np.mean(np.abs(padded[index]) ** 2, axis=1)
    peak = power.max()
    if peak <= 0:
        return audio[:0]
    db = 10.0 * np.log10(np.maximum(power, 1e-10)) - 10.0 * np.log10(max(peak, 1e-10))
    loud = np.flatnonzero(db > -top_db)
    start = int(loud[0]) * TRIM_HOP
    end = min(len(audio), (int(loud[-1]) + 1) * TRIM_HOP)
    return audio[start:end]


def load_voice_encoder(state: dict[str, torch.Tensor]) -> VoiceEncoder:
    """The voice encoder from ve.safetensors; CheckpointError naming a missing, unexpected or
    mis-shaped tensor."""
    model = VoiceEncoder()
    check_state_dict(model.state_dict(), state, "ve.safetensors")
    model.load_state_dict(state)
    return model.eval()
