"""Zonos' speaker model: a reference clip → the 128-value embedding its speaker conditioner
takes (Zyphra/Zonos-v0.1-speaker-embedding: `ResNet293_SimAM_ASP_base.pt`, the network's
state dict, and `ResNet293_SimAM_ASP_base_LDA-128.pt`, a linear map 256 → 128).

The clip, at 16 kHz mono, becomes an 80-band log mel spectrogram (25 ms Hann windows every
10 ms, 512-point FFT, power, HTK mel scale without normalisation, log(x + 1e-6), each band's
mean over time removed); a ResNet of SimAM basic blocks ([10, 20, 64, 3] blocks at 1, 2, 4 and
8 x 64 channels) reads it as an image, attentive statistics pooling turns the last feature map
into means and deviations, a linear bottleneck makes 256 values and the LDA map 128. Module
names follow the published state dict, so it loads as is. Clips are resampled by
libswresample (PyAV) rather than the reference's torchaudio sinc resampler."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError

SAMPLE_RATE = 16_000
N_FFT, WINDOW, HOP, N_MELS = 512, 400, 160, 80
BLOCKS = (10, 20, 64, 3)
NETWORK_FILE = "ResNet293_SimAM_ASP_base.pt"
LDA_FILE = "ResNet293_SimAM_ASP_base_LDA-128.pt"
SPEAKER_REPO = "Zyphra/Zonos-v0.1-speaker-embedding"


def _hz_to_mel(f: float) -> float:
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_filters(n_freqs: int = N_FFT // 2 + 1, n_mels: int = N_MELS) -> torch.Tensor:
    """Triangular HTK-mel filters over 0 .. sample_rate / 2, unnormalised: [n_freqs, n_mels]."""
    freqs = torch.linspace(0, SAMPLE_RATE // 2, n_freqs)
    mels = torch.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2)
    edges = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    width = edges[1:] - edges[:-1]
    slope = edges[None, :] - freqs[:, None]  # [n_freqs, n_mels + 2]
    rising, falling = -slope[:, :-2] / width[:-1], slope[:, 2:] / width[1:]
    return torch.clamp(torch.minimum(rising, falling), min=0.0)


class LogMel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        window = F.pad(torch.hann_window(WINDOW), ((N_FFT - WINDOW) // 2,) * 2)
        self.register_buffer("window", window, persistent=False)
        self.register_buffer("filters", mel_filters(), persistent=False)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [B, samples] → [B, 80, frames]."""
        spec = torch.stft(
            wav, N_FFT, HOP, N_FFT, self.window, center=True, pad_mode="reflect",
            return_complex=True,
        ).abs().pow(2)  # fmt: skip
        mel = torch.log((spec.transpose(1, 2) @ self.filters).transpose(1, 2) + 1e-6)
        return mel - mel.mean(dim=2, keepdim=True)


class SimAMBlock(nn.Module):
    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = nn.Sequential()
        if stride != 1 or channels_in != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(channels_in, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        # SimAM: weigh each activation by how far it stands out of its channel's map.
        n = out.shape[2] * out.shape[3] - 1
        d = (out - out.mean(dim=(2, 3), keepdim=True)).pow(2)
        energy = d / (4 * (d.sum(dim=(2, 3), keepdim=True) / n + 1e-4)) + 0.5
        return F.relu(out * torch.sigmoid(energy) + self.downsample(x))


class Front(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        channels_in = width
        for i, count in enumerate(BLOCKS):
            channels = width * 2**i
            blocks = []
            for j in range(count):
                blocks.append(SimAMBlock(channels_in, channels, 2 if i and not j else 1))
                channels_in = channels
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        for i in range(len(BLOCKS)):
            x = getattr(self, f"layer{i + 1}")(x)
        return x


class Pooling(nn.Module):
    """Attentive statistics pooling over time of the flattened (channels x bands) map."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.attention = nn.Sequential(
            nn.Conv1d(features, 128, 1),
            nn.ReLU(),
            nn.BatchNorm1d(128),
            nn.Conv1d(128, features, 1),
            nn.Softmax(dim=2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1, x.shape[-1])
        w = self.attention(x)
        mean = (x * w).sum(dim=2)
        std = ((x.pow(2) * w).sum(dim=2) - mean.pow(2)).clamp(min=1e-5).sqrt()
        return torch.cat([mean, std], dim=1)


class SpeakerNetwork(nn.Module):
    """ResNet293_based's layout: `front`, `pooling`, `bottleneck`."""

    def __init__(self, width: int = 64, embedding: int = 256) -> None:
        super().__init__()
        features = width * 8 * (N_MELS // 8)
        self.front = Front(width)
        self.pooling = Pooling(features)
        self.bottleneck = nn.Linear(2 * features, embedding)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, 80, frames] → [B, embedding]."""
        return self.bottleneck(self.pooling(self.front(mel[:, None])))


class SpeakerModel(nn.Module):
    def __init__(self, network: SpeakerNetwork, lda: nn.Linear) -> None:
        super().__init__()
        self.features = LogMel()
        self.network = network
        self.lda = lda

    @torch.inference_mode()
    def embed(self, wav: np.ndarray) -> list[float]:
        """A clip (float32 mono at 16 kHz) → the speaker conditioner's input."""
        device = self.lda.weight.device
        x = torch.as_tensor(wav, dtype=torch.float32, device=device)[None]
        return self.lda(self.network(self.features(x)).float())[0].tolist()


def load_speaker_model(folder: Path, device: torch.device) -> SpeakerModel:
    try:
        network_state = torch.load(folder / NETWORK_FILE, map_location="cpu", weights_only=True)
        lda_state = torch.load(folder / LDA_FILE, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"could not read Zonos' speaker model in {folder}: {exc}") from None
    width = int(network_state["front.conv1.weight"].shape[0])
    embedding = int(network_state["bottleneck.weight"].shape[0])
    network = SpeakerNetwork(width, embedding)
    out_features, in_features = lda_state["weight"].shape
    lda = nn.Linear(in_features, out_features)
    try:
        network.load_state_dict(network_state)
        lda.load_state_dict(lda_state)
    except RuntimeError as exc:
        raise CheckpointError(f"Zonos' speaker model in {folder} does not match: {exc}") from None
    return SpeakerModel(network, lda).to(device).eval()


def write_speaker_model(folder: Path, width: int, seed: int) -> None:
    """Seeded random weights in the published layout (batch-norm statistics random too)."""
    torch.manual_seed(seed)
    network = SpeakerNetwork(width)
    with torch.no_grad():
        for name, buffer in network.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(std=0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(network.state_dict(), folder / NETWORK_FILE)
    torch.save(nn.Linear(256, 128).state_dict(), folder / LDA_FILE)
