"""GLM-4-Voice's speech tokenizer (THUDM/glm-4-voice-tokenizer, `WhisperVQEncoder`): 16 kHz
audio → speech token ids at 12.5 per second, the ids the backbone reads as <|audio_i|>.

A Whisper encoder (log-mel → two convolutions, the second of stride 2: 50 frames/s → pre-LN
transformer blocks) cut at `quantize_position` blocks. Its differences from Whisper: the two
convolutions are causal (left padding 2, `encoder_causal_convolution`), attention is
block-causal (each frame sees every earlier frame and its own block of
`quantize_causal_block_size` frames, `quantize_causal_block_size / pooling_kernel_size` after
pooling), and after block `pooling_position` the frames are average-pooled by
`pooling_kernel_size` (50 → 12.5 per second). After block `quantize_position` each frame
becomes the id of its nearest codebook row (squared Euclidean distance).
Checkpoint names: `model.encoder.{conv1,conv2,embed_positions,layers.N.…,codebook}` with
Whisper's layer names; the decoder and the unused `embed_positions2` are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError

SAMPLE_RATE = 16000
CHUNK_SECONDS = 30  # the reference tokenizes long audio in 30 s pieces


@dataclass(frozen=True)
class WhisperVQArgs:
    num_mel_bins: int
    d_model: int
    heads: int
    ffn_dim: int
    max_source_positions: int
    quantize_position: int  # blocks run before quantising
    pooling_position: int
    pooling_kernel_size: int
    pooling_type: str  # "avg" (the published tokenizer) or "max"
    codebook_size: int
    causal_block_size: int | None  # in frames at 50/s; None: full attention
    causal_convolution: bool

    @classmethod
    def from_config(cls, cfg: dict) -> WhisperVQArgs:
        try:
            if not cfg.get("quantize_vocab_size"):
                raise CheckpointError(
                    "config.json has no quantize_vocab_size: not a WhisperVQ tokenizer"
                )
            if cfg.get("encoder_causal_attention") or cfg.get("quantize_causal_encoder"):
                raise CheckpointError("causal-encoder WhisperVQ variants are not supported")
            kind = cfg.get("pooling_type", "max")
            if kind not in ("avg", "max"):
                raise CheckpointError(f"pooling_type {kind!r} is not supported (avg, max)")
            block = cfg.get("quantize_causal_block_size")
            return cls(
                num_mel_bins=int(cfg["num_mel_bins"]),
                d_model=int(cfg["d_model"]),
                heads=int(cfg["encoder_attention_heads"]),
                ffn_dim=int(cfg["encoder_ffn_dim"]),
                max_source_positions=int(cfg["max_source_positions"]),
                quantize_position=int(cfg["quantize_position"]),
                pooling_position=int(cfg["pooling_position"]),
                pooling_kernel_size=int(cfg["pooling_kernel_size"]),
                pooling_type=kind,
                codebook_size=int(cfg["quantize_vocab_size"]),
                causal_block_size=int(block) if block else None,
                causal_convolution=bool(cfg.get("encoder_causal_convolution", False)),
            )
        except KeyError as missing:
            raise CheckpointError(f"config.json lacks the WhisperVQ field {missing}") from None

    @property
    def samples_per_token(self) -> int:
        return 160 * 2 * self.pooling_kernel_size  # hop 160, conv2 stride 2, pooling


class EncoderLayer(nn.Module):
    """Whisper's pre-LN block (names as transformers' WhisperEncoderLayer)."""

    def __init__(self, a: WhisperVQArgs) -> None:
        super().__init__()
        self.heads = a.heads
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(a.d_model, a.d_model)
        self.self_attn.k_proj = nn.Linear(a.d_model, a.d_model, bias=False)
        self.self_attn.v_proj = nn.Linear(a.d_model, a.d_model)
        self.self_attn.out_proj = nn.Linear(a.d_model, a.d_model)
        self.self_attn_layer_norm = nn.LayerNorm(a.d_model)
        self.fc1 = nn.Linear(a.d_model, a.ffn_dim)
        self.fc2 = nn.Linear(a.ffn_dim, a.d_model)
        self.final_layer_norm = nn.LayerNorm(a.d_model)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, D]; allowed [B, 1, T, T] bool (True: may attend) or None (all)."""
        b, t, d = x.shape
        h = self.self_attn_layer_norm(x)
        att = self.self_attn

        def heads(p: nn.Linear) -> torch.Tensor:
            return p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(att.q_proj), heads(att.k_proj), heads(att.v_proj), allowed
        )
        x = x + att.out_proj(out.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


def block_causal_allowed(valid: torch.Tensor, block: int | None) -> torch.Tensor:
    """valid [B, T] bool → allowed [B, 1, T, T]: earlier frames, the frame's own block, and only
    valid (non-padding) keys."""
    t = valid.shape[1]
    idx = torch.arange(t, device=valid.device)
    allowed = idx[None, :] <= idx[:, None]
    if block is None:
        allowed = torch.ones_like(allowed)
    else:
        allowed = allowed | (idx[None, :] // block == idx[:, None] // block)
    return (allowed[None] & valid[:, None, :])[:, None]


class WhisperVQEncoder(nn.Module):
    def __init__(self, a: WhisperVQArgs) -> None:
        super().__init__()
        self.args = a
        self.conv1 = nn.Conv1d(
            a.num_mel_bins, a.d_model, 3, padding=0 if a.causal_convolution else 1
        )
        self.conv2 = nn.Conv1d(
            a.d_model, a.d_model, 3, stride=2, padding=0 if a.causal_convolution else 1
        )
        self.embed_positions = nn.Embedding(a.max_source_positions, a.d_model)
        self.layers = nn.ModuleList(EncoderLayer(a) for _ in range(a.quantize_position))
        self.codebook = nn.Embedding(a.codebook_size, a.d_model)

    def _conv(self, conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
        if self.args.causal_convolution:
            x = F.pad(x, (2, 0))  # kernel 3: two frames of the past, none of the future
        return F.gelu(conv(x))

    def hidden_states(
        self, mel: torch.Tensor, mel_valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, n_mels, F] (F even), mel_valid [B, F] bool → (the frames that are quantised
        [B, T', D], their validity [B, T'])."""
        a = self.args
        x = self._conv(self.conv2, self._conv(self.conv1, mel)).transpose(1, 2)  # [B, F/2, D]
        t = x.shape[1]
        if t > a.max_source_positions:
            raise ValueError(f"{t} frames exceed the encoder's {a.max_source_positions} positions")
        x = x + self.embed_positions.weight[:t]
        valid = mel_valid[:, ::2]
        allowed = block_causal_allowed(valid, a.causal_block_size)
        for i, layer in enumerate(self.layers):
            x = layer(x, allowed)
            if i + 1 == a.pooling_position:
                k = a.pooling_kernel_size
                x = F.pad(x.transpose(1, 2), (0, -x.shape[1] % k))
                pool = F.avg_pool1d if a.pooling_type == "avg" else F.max_pool1d
                x = pool(x, k).transpose(1, 2)
                valid = valid[:, ::k]
                block = None if a.causal_block_size is None else a.causal_block_size // k
                allowed = block_causal_allowed(valid, block)
        return x, valid

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., D] → the index of the nearest codebook row [...] (squared Euclidean)."""
        flat = x.reshape(-1, x.shape[-1]).float()
        book = self.codebook.weight.float()
        dist = flat.square().sum(1, keepdim=True) - 2 * flat @ book.t() + book.square().sum(1)
        return dist.argmin(1).reshape(x.shape[:-1])

    # --- loading ---------------------------------------------------------------------------
    def load_published(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy `model.encoder.*` tensors in; blocks past quantize_position, the final layer
        norm (used only without quantising), `embed_positions2` (feeds the unused decoder side)
        and everything outside the encoder are skipped. CheckpointError for anything missing,
        unknown or misshapen."""
        params = dict(self.named_parameters())
        seen = set()
        with torch.no_grad():
            for name, tensor in tensors.items():
                if not name.startswith("model.encoder."):
                    continue
                ours = name.removeprefix("model.encoder.")
                if ours.startswith(("layer_norm.", "embed_positions2.")):
                    continue
                if (
                    ours.startswith("layers.")
                    and int(ours.split(".")[1]) >= self.args.quantize_position
                ):
                    continue
                if ours not in params:
                    raise CheckpointError(f"unexpected tensor {name!r} in the speech tokenizer")
                if tuple(params[ours].shape) != tuple(tensor.shape):
                    raise CheckpointError(
                        f"tensor {name!r} has shape {tuple(tensor.shape)}, config.json implies "
                        f"{tuple(params[ours].shape)}"
                    )
                params[ours].copy_(tensor)
                seen.add(ours)
        missing = sorted(set(params) - seen)
        if missing:
            raise CheckpointError(
                f"speech tokenizer checkpoint lacks model.encoder.{missing[0]} ({len(missing)} missing)"
            )


class GlmSpeechTokenizer:
    """16 kHz mono float audio → speech token ids, as the reference `extract_speech_token`."""

    def __init__(self, encoder: WhisperVQEncoder, features) -> None:
        self.encoder = encoder.eval()
        self.features = features  # transformers.WhisperFeatureExtractor

    @torch.inference_mode()
    def encode(self, audio: np.ndarray) -> list[int]:
        if audio.ndim != 1:
            raise ValueError("the speech tokenizer takes mono audio: shape [samples]")
        if not len(audio):
            return []
        device = self.encoder.codebook.weight.device
        dtype = self.encoder.codebook.weight.dtype
        ids: list[int] = []
        step = CHUNK_SECONDS * SAMPLE_RATE
        for start in range(0, len(audio), step):
            piece = audio[start : start + step].astype(np.float32)
            feats = self.features(
                piece,
                sampling_rate=SAMPLE_RATE,
                return_attention_mask=True,
                return_tensors="pt",
                padding="longest",
                pad_to_multiple_of=self.encoder.args.samples_per_token,
            )
            mel = feats.input_features.to(device, dtype)
            hidden, valid = self.encoder.hidden_states(mel, feats.attention_mask.to(device).bool())
            ids += self.encoder.quantize(hidden)[valid].tolist()
        return ids


def load_speech_tokenizer(
    folder: Path, device: torch.device, dtype: torch.dtype
) -> GlmSpeechTokenizer:
    """A THUDM/glm-4-voice-tokenizer folder: config.json, preprocessor_config.json, safetensors."""
    from transformers import WhisperFeatureExtractor

    from models.loader import iter_safetensors

    try:
        cfg = json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"speech tokenizer folder {folder} lacks config.json") from None
    if not (folder / "preprocessor_config.json").exists():
        raise CheckpointError(f"speech tokenizer folder {folder} lacks preprocessor_config.json")
    args = WhisperVQArgs.from_config(cfg)
    encoder = WhisperVQEncoder(args)
    encoder.load_published(dict(iter_safetensors(folder)))
    features = WhisperFeatureExtractor.from_pretrained(str(folder))
    if features.feature_size != args.num_mel_bins:
        raise CheckpointError(
            f"preprocessor_config.json has {features.feature_size} mel bins, config.json {args.num_mel_bins}"
        )
    return GlmSpeechTokenizer(encoder.to(device, dtype), features)


def random_speech_tokenizer(cfg: dict, device: torch.device, seed: int = 0) -> GlmSpeechTokenizer:
    """A tokenizer of `cfg`'s shapes (a glm-4-voice-tokenizer config.json) with seeded random
    weights, built on `device` (the meta device: shapes only), nothing downloaded. Features:
    transformers' WhisperFeatureExtractor with the config's mel bins (whisper-large-v3's
    preprocessor: 16 kHz, hop 160, 30 s). Runs in float32, as load_speech_tokenizer's."""
    from transformers import WhisperFeatureExtractor

    args = WhisperVQArgs.from_config(cfg)
    torch.manual_seed(seed)
    with torch.device(device):
        encoder = WhisperVQEncoder(args)
    return GlmSpeechTokenizer(encoder, WhisperFeatureExtractor(feature_size=args.num_mel_bins))
