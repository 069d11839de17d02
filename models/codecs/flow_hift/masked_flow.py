"""CosyVoice 1's `MaskedDiffWithXvec` + `ConditionalCFM` (GLM-4-Voice's decoder flow): speech
tokens → mel at 22050/256 frames per second.

Tokens are embedded and encoded (block-causal conformer), projected to mel space, stretched to
`mel_frames(tokens)` frames by nearest-neighbour interpolation and smoothed by the length
regulator's convolutions: that is the condition `mu`. The mel is integrated from noise by 10
Euler steps on the cosine schedule with classifier-free guidance (flow.cfg_euler). Frames whose
mel is known (the streaming prompt) are given as `cond`. Parameter names follow flow.pt."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.flow_hift.block_encoder import BlockConformerEncoder
from models.codecs.flow_hift.flow import cfg_euler
from models.codecs.flow_hift.unet_estimator import ConditionalDecoder


@dataclass(frozen=True)
class MaskedFlowConfig:
    input_size: int  # token embedding width
    output_size: int  # n_mels
    spk_embed_dim: int
    vocab_size: int
    input_frame_rate: float  # tokens per second (12.5)
    sample_rate: int  # 22050; mel hop 256
    encoder_dim: int
    encoder_heads: int
    encoder_linear_units: int
    encoder_blocks: int
    block_size: int  # the encoder's attention block, in tokens
    macaron: bool
    conv_kernel: int  # 0: no convolution module
    regulator_channels: int
    sampling_ratios: tuple[int, ...]  # one conv3 + GroupNorm + Mish per entry
    estimator_in_channels: int
    estimator_channels: tuple[int, ...]
    attention_head_dim: int
    n_blocks: int
    num_mid_blocks: int
    num_heads: int
    inference_cfg_rate: float
    t_scheduler: str
    n_timesteps: int = 10  # MaskedDiffWithXvec.inference's fixed step count
    hop: int = 256


class FlowDecoder(nn.Module):
    """`decoder.*` of flow.pt: the CFM wrapper holds only the estimator's weights."""

    def __init__(self, estimator: ConditionalDecoder) -> None:
        super().__init__()
        self.estimator = estimator


class InterpolateRegulator(nn.Module):
    """`length_regulator.model.*`: (conv3, GroupNorm(1), Mish) per sampling ratio, conv1."""

    def __init__(self, channels: int, n: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(n):
            layers += [nn.Conv1d(channels, channels, 3, padding=1), nn.GroupNorm(1, channels)]
            layers.append(nn.Mish())
        layers.append(nn.Conv1d(channels, channels, 1))
        self.model = nn.Sequential(*layers)

    def forward(self, h: torch.Tensor, frames: int) -> torch.Tensor:
        """h [B, T, C] (every row T real tokens) → [B, C, frames]. GroupNorm normalises over
        all frames, so rows must not carry padding (the caller batches equal shapes only)."""
        x = F.interpolate(h.transpose(1, 2), size=frames, mode="nearest")
        return self.model(x)


class MaskedDiffWithXvec(nn.Module):
    def __init__(self, cfg: MaskedFlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = BlockConformerEncoder(
            cfg.input_size,
            cfg.encoder_dim,
            cfg.encoder_heads,
            cfg.encoder_linear_units,
            cfg.encoder_blocks,
            cfg.block_size,
            cfg.macaron,
            cfg.conv_kernel,
        )
        self.encoder_proj = nn.Linear(cfg.encoder_dim, cfg.output_size)
        self.length_regulator = InterpolateRegulator(
            cfg.regulator_channels, len(cfg.sampling_ratios)
        )
        self.decoder = FlowDecoder(
            ConditionalDecoder(
                cfg.estimator_in_channels,
                cfg.output_size,
                cfg.estimator_channels,
                cfg.attention_head_dim,
                cfg.n_blocks,
                cfg.num_mid_blocks,
                cfg.num_heads,
            )
        )
        t = torch.linspace(0, 1, cfg.n_timesteps + 1)
        if cfg.t_scheduler == "cosine":
            t = 1 - torch.cos(t * 0.5 * torch.pi)
        self.register_buffer("t_span", t, persistent=False)

    def mel_frames(self, tokens: int) -> int:
        """Mel frames of `tokens` speech tokens, computed as the reference does (float32
        `token_len / input_frame_rate * 22050 / 256`, truncated): 6.89 per token."""
        n = torch.tensor([tokens], dtype=torch.int32) / self.cfg.input_frame_rate
        return int((n * self.cfg.sample_rate / self.cfg.hop).int()[0])

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] (no padding) → encoder output projected to mel width [B, T, M]."""
        x = self.input_embedding(tokens.clamp(min=0))
        lengths = torch.full((tokens.shape[0],), tokens.shape[1], device=tokens.device)
        return self.encoder_proj(self.encoder(x, lengths))

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        frames: int,
        cond: torch.Tensor,
        noise: torch.Tensor,
        speaker: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens [B, T]; frames: mel frames to make; cond [B, M, frames] (known mel, zeros
        elsewhere); noise [B, M, frames] the starting point; speaker [B, E] x-vectors (None:
        zeros, as GLM-4-Voice) → mel [B, M, frames] float32."""
        b = tokens.shape[0]
        mu = self.length_regulator(self.encode(tokens), frames)
        if speaker is None:
            speaker = torch.zeros(b, self.cfg.spk_embed_dim, device=mu.device, dtype=mu.dtype)
        spks = self.spk_embed_affine_layer(F.normalize(speaker, dim=1))
        mask = torch.ones(b, 1, frames, device=mu.device, dtype=mu.dtype)
        return cfg_euler(
            self.decoder.estimator,
            noise.to(mu.dtype),
            mu,
            mask,
            spks,
            cond.to(mu.dtype),
            self.t_span.to(mu.dtype),
            self.cfg.inference_cfg_rate,
        )
