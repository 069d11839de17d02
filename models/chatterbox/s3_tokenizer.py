"""The S3 speech tokenizer v2 (`speech_tokenizer_v2_25hz`, s3gen.safetensors' `tokenizer.*`):
16 kHz speech → 25 Hz speech tokens in [0, 6561), the tokens T3 speaks in and S3Gen decodes.
A reference clip's tokens are T3's conditioning prompt and S3Gen's prompt tokens.

Whisper's 128-bin log-mel (CosyVoice 2's features.whisper_log_mel: the same frames and Slaney
filters as the package's log_mel_spectrogram), two stride-2 convolutions (100 → 25 Hz),
transformer blocks whose attention adds rotary positions (64-wide heads) and an FSMN memory
(a depthwise 31-tap convolution over the values), then finite scalar quantisation: 8
projections, each tanh'd and rounded to {0, 1, 2}, read as a base-3 number. CosyVoice 2 runs
the same network from its ONNX file (models/cosyvoice2/voices.py); Chatterbox ships it as
PyTorch weights, run here. Parameter names follow the `s3tokenizer` package's S3TokenizerV2.

One utterance at a time, up to 30 s (the package splits longer audio; voice clips are
shorter): no padding, so no masks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError, check_state_dict

N_MELS = 128
HEAD_DIM = 64  # the rotary table's width: the package hard-codes 64
FSMN_KERNEL = 31
MAX_FRAMES = 3000  # 30 s of 100 Hz mel frames
PREFIX = "tokenizer."


@dataclass(frozen=True)
class TokenizerSizes:
    width: int  # n_audio_state (1280 published)
    heads: int  # 20 published
    layers: int  # 6 published


def rotary_tables(frames: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, 64] of precompute_freqs_cis(64, ...) (each half the same frequencies)."""
    freqs = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM))
    angles = torch.outer(torch.arange(frames, device=device).float(), freqs)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, 64]: rotate-half rotary positions."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[None, :, None] + turned * sin[None, :, None]


class FsmnAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.fsmn_block = nn.Conv1d(width, width, FSMN_KERNEL, groups=width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.query(x).view(b, t, self.heads, -1)
        k = self.key(x).view(b, t, self.heads, -1)
        v = self.value(x)
        pad = (FSMN_KERNEL - 1) // 2
        memory = self.fsmn_block(F.pad(v.transpose(1, 2), (pad, FSMN_KERNEL - 1 - pad)))
        memory = memory.transpose(1, 2) + v
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scale = (d // self.heads) ** -0.25
        scores = (q.transpose(1, 2) * scale) @ (k.permute(0, 2, 3, 1) * scale)
        weights = scores.float().softmax(dim=-1).to(q.dtype)
        heads = weights @ v.view(b, t, self.heads, -1).transpose(1, 2)
        return self.out(heads.transpose(1, 2).reshape(b, t, d)) + memory


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = FsmnAttention(width, heads)
        self.attn_ln = nn.LayerNorm(width, eps=1e-5)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.mlp_ln = nn.LayerNorm(width, eps=1e-5)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_ln(x), cos, sin)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, sizes: TokenizerSizes) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(N_MELS, sizes.width, 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(sizes.width, sizes.width, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(Block(sizes.width, sizes.heads) for _ in range(sizes.layers))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, 128, T] → [B, ceil(T / 4), width]."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        cos, sin = rotary_tables(x.shape[1], x.device)
        for block in self.blocks:
            x = block(x, cos.to(x.dtype), sin.to(x.dtype))
        return x


class Codebook(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.project_down = nn.Linear(width, 8)


class Quantizer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self._codebook = Codebook(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, width] → tokens [B, T] long (FSQCodebook.encode)."""
        digits = (self._codebook.project_down(x).float().tanh() * 0.9990000128746033).round() + 1
        powers = 3 ** torch.arange(8, device=x.device, dtype=digits.dtype)
        return (digits * powers).sum(dim=-1).long()


class S3Tokenizer(nn.Module):
    def __init__(self, sizes: TokenizerSizes) -> None:
        super().__init__()
        self.sizes = sizes
        self.encoder = AudioEncoder(sizes)
        self.quantizer = Quantizer(sizes.width)

    @torch.inference_mode()
    def tokens_of_mel(self, mel: torch.Tensor) -> list[int]:
        """One utterance's log-mel [128, T] → its tokens (ceil(T / 4) of them)."""
        if mel.shape[1] > MAX_FRAMES:
            raise ValueError(f"speech longer than {MAX_FRAMES // 100} s: use a shorter clip")
        device = self.quantizer._codebook.project_down.weight.device
        hidden = self.encoder(mel[None].to(device))
        return self.quantizer(hidden)[0].tolist()

    def tokens(self, audio16k: np.ndarray, max_tokens: int | None = None) -> list[int]:
        """16 kHz speech → tokens (S3Tokenizer.forward; `max_tokens`: its max_len, the mel cut
        to 4 frames a token first)."""
        from models.cosyvoice2.features import whisper_log_mel

        mel = torch.from_numpy(whisper_log_mel(np.asarray(audio16k, dtype=np.float32), N_MELS))
        if max_tokens is not None:
            mel = mel[:, : 4 * max_tokens]
        return self.tokens_of_mel(mel)


def tokenizer_sizes(state: dict[str, torch.Tensor]) -> TokenizerSizes:
    try:
        width = state[PREFIX + "encoder.conv1.weight"].shape[0]
        layers = 0
        while f"{PREFIX}encoder.blocks.{layers}.attn.query.weight" in state:
            layers += 1
    except KeyError as missing:
        raise CheckpointError(f"s3gen.safetensors lacks the tensor {missing}") from None
    if width % HEAD_DIM:
        raise CheckpointError(f"the S3 tokenizer's width {width} is not a multiple of 64")
    return TokenizerSizes(width, width // HEAD_DIM, layers)


def has_tokenizer(state: dict[str, torch.Tensor]) -> bool:
    return PREFIX + "encoder.conv1.weight" in state


def load_s3_tokenizer(state: dict[str, torch.Tensor]) -> S3Tokenizer:
    """The tokenizer from s3gen.safetensors' `tokenizer.*` tensors (its mel filters and window
    buffers, which the package recomputes, are not needed)."""
    own = {
        k[len(PREFIX) :]: v
        for k, v in state.items()
        if k.startswith(PREFIX) and not k.endswith(("_mel_filters", "window"))
    }
    model = S3Tokenizer(tokenizer_sizes(state))
    check_state_dict(model.state_dict(), own, "s3gen.safetensors' speech tokenizer")
    model.load_state_dict(own)
    return model.eval()
