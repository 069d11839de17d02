"""The Base models' speaker encoder (ECAPA-TDNN, `speaker_encoder.*` in model.safetensors): a
24 kHz clip's 128-bin log-mel → one x-vector the width of the talker, which takes the place of
a preset speaker's codec row in the prompt (voice cloning without the clip's transcript:
the package's `x_vector_only_mode`).

Its convolutions pad "same" by reflection, as the package's do; module names follow the
checkpoint's, so its tensors load by name.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SAMPLE_RATE = 24000
N_FFT, HOP, N_MELS, F_MAX = 1024, 256, 128, 12000.0


def log_mel(audio: np.ndarray) -> torch.Tensor:
    """The package's mel_spectrogram for the speaker encoder (n_fft 1024, hop 256, Hann 1024,
    128 Slaney mels to 12 kHz, reflect-padded, magnitude, natural log clamped at 1e-5):
    float32 mono at 24 kHz → [frames, 128]."""
    from models.qwen3_tts.clip_encoder import require_transformers

    require_transformers()
    from transformers.audio_utils import mel_filter_bank

    filters = mel_filter_bank(
        num_frequency_bins=N_FFT // 2 + 1,
        num_mel_filters=N_MELS,
        min_frequency=0.0,
        max_frequency=F_MAX,
        sampling_rate=SAMPLE_RATE,
        norm="slaney",
        mel_scale="slaney",
    )  # [bins, mels]
    x = torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None]
    pad = (N_FFT - HOP) // 2
    x = F.pad(x, (pad, pad), mode="reflect")[0, 0]
    spec = torch.stft(
        x, N_FFT, HOP, window=torch.hann_window(N_FFT), center=False, return_complex=True
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.from_numpy(filters.T.astype(np.float32)) @ magnitude
    return torch.clamp(mel, min=1e-5).log().T.contiguous()


def _conv(c_in: int, c_out: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _conv(c_in, c_out, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2Net(nn.Module):
    """The channels in `scale` groups; group i > 0 goes through its TDNN after the previous
    group's output is added (group 0 passes through)."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.blocks = nn.ModuleList(TDNN(width, width, kernel, dilation) for _ in range(scale - 1))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        for i, block in enumerate(self.blocks, start=1):
            out.append(block(parts[i] if i == 1 else parts[i] + out[-1]))
        return torch.cat(out, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, inner: int) -> None:
        super().__init__()
        self.conv1 = _conv(channels, inner)
        self.conv2 = _conv(inner, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, scale: int, se: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TDNN(c_in, c_out, 1, 1)
        self.res2net_block = Res2Net(c_out, scale, kernel, dilation)
        self.tdnn2 = TDNN(c_out, c_out, 1, 1)
        self.se_block = SqueezeExcitation(c_out, se)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))
        return h + x


def _stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (weights * x).sum(dim=2)
    var = (weights * (x - mean[..., None]).pow(2)).sum(dim=2)
    return mean, torch.sqrt(var.clamp(min=1e-12))


class AttentiveStatsPool(nn.Module):
    """Attention over time (conditioned on the clip's mean and std) → weighted mean and std."""

    def __init__(self, channels: int, attention: int) -> None:
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention, 1, 1)
        self.conv = _conv(attention, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        mean, std = _stats(x, torch.full_like(x[:, :1], 1.0 / t))
        context = torch.cat(
            [x, mean[..., None].expand(-1, -1, t), std[..., None].expand(-1, -1, t)], 1
        )
        weights = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _stats(x, weights)
        return torch.cat([mean, std], dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        channels = list(cfg["enc_channels"])
        kernels, dilations = list(cfg["enc_kernel_sizes"]), list(cfg["enc_dilations"])
        self.blocks = nn.ModuleList(
            [TDNN(int(cfg["mel_dim"]), channels[0], kernels[0], dilations[0])]
        )
        for i in range(1, len(channels) - 1):
            self.blocks.append(
                SERes2NetBlock(
                    channels[i - 1],
                    channels[i],
                    int(cfg["enc_res2net_scale"]),
                    int(cfg["enc_se_channels"]),
                    kernels[i],
                    dilations[i],
                )
            )
        self.mfa = TDNN(channels[-1], channels[-1], kernels[-1], dilations[-1])
        self.asp = AttentiveStatsPool(channels[-1], int(cfg["enc_attention_channels"]))
        self.fc = _conv(channels[-1] * 2, int(cfg["enc_dim"]))

    @torch.inference_mode()
    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """mels [B, frames, mel_dim] → x-vectors [B, enc_dim]."""
        x = mels.transpose(1, 2)
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(x))[..., 0]
