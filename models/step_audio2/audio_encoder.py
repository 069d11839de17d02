"""Step-Audio 2's audio-input stage: 16 kHz speech → Whisper log-mel (128 bins) → the
Whisper-style encoder → the adapter → decoder input embeddings, 12.5 a second, batched.

Encoder (checkpoint prefix `encoder.`): conv1 (k3) + GELU, conv2 (k3, stride 2) + GELU, a
learned positional embedding, pre-norm blocks (`attn_ln`, attention with `query`/`key` (no
bias)/`value`/`out`, `mlp_ln`, `mlp.0`/`mlp.2` with GELU), a stride-2 average pool (25
frames/s), `after_norm`. Adapter (`adapter.`): conv (k3, stride 2) + GELU, `linear1` + ReLU,
`linear2` to the decoder's width. That is whisper-large-v3's encoder without its final layer
norm, then pool, norm and adapter (tests/models/test_step_audio2_parity.py checks it against
transformers' WhisperEncoder).

Lengths follow the reference (stepaudio2.py, utils.py): a piece of audio (at most 25 s) is
padded by 479 samples before the STFT, its mel has F frames and its length is F - 2; the
attention ignores conv frames at or past that length (on the reference's frame grid, so the
last conv frame of every piece is ignored), the pool keeps (length + 1) // 4 frames and the
adapter (those - 1) // 2 + 1 embeddings. In a batch each row is computed as if it were alone
(frames past its own end are zeroed where the reference's single-row run zero-pads), so a
turn's embeddings do not depend on what it is batched with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError

SAMPLE_RATE = 16000
PIECE_SAMPLES = 25 * SAMPLE_RATE  # the reference encodes long audio in 25 s pieces
MEL_PADDING = 479  # samples appended before the STFT (reference log_mel_spectrogram)
ADAPTER_STATE = 2048  # the adapter's hidden width (fixed in the reference Adaptor)


@dataclass(frozen=True)
class AudioEncoderConfig:
    n_mels: int
    n_ctx: int
    n_state: int
    n_head: int
    n_layer: int
    llm_dim: int
    kernel_size: int = 3
    adapter_stride: int = 2

    @classmethod
    def from_config(cls, cfg: dict) -> AudioEncoderConfig:
        try:
            c = cls(
                n_mels=int(cfg["n_mels"]),
                n_ctx=int(cfg["n_audio_ctx"]),
                n_state=int(cfg["n_audio_state"]),
                n_head=int(cfg["n_audio_head"]),
                n_layer=int(cfg["n_audio_layer"]),
                llm_dim=int(cfg["llm_dim"]),
                kernel_size=int(cfg.get("kernel_size", 3)),
                adapter_stride=int(cfg.get("adapter_stride", 2)),
            )
        except KeyError as missing:
            raise CheckpointError(f"config.json audio_encoder_config lacks {missing}") from None
        if (c.kernel_size, c.adapter_stride) != (3, 2):
            raise CheckpointError(
                f"audio_encoder_config has kernel_size {c.kernel_size}, adapter_stride "
                f"{c.adapter_stride}; only 3 and 2 (Step-Audio 2's) are supported"
            )
        return c


def piece_mels(pcm_16k: np.ndarray) -> list[torch.Tensor]:
    """A turn's audio → one log-mel [n_mels=128, F] per 25 s piece (reference framing)."""
    from models.cosyvoice2.features import whisper_log_mel

    pcm = np.asarray(pcm_16k, dtype=np.float32).reshape(-1)
    return [
        torch.from_numpy(whisper_log_mel(np.pad(pcm[i : i + PIECE_SAMPLES], (0, MEL_PADDING))))
        for i in range(0, len(pcm), PIECE_SAMPLES)
    ]


def embeddings_of(mel_frames: int) -> int:
    """Adapter embeddings of a piece whose mel has `mel_frames` frames (the reference's
    compute_token_num)."""
    length = mel_frames - 2
    pooled = (length + 1) // 2 // 2
    return max(0, (pooled - 1) // 2 + 1) if pooled > 0 else 0


class EncoderBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn = nn.Module()
        self.attn.query = nn.Linear(width, width)
        self.attn.key = nn.Linear(width, width, bias=False)
        self.attn.value = nn.Linear(width, width)
        self.attn.out = nn.Linear(width, width)
        self.attn_ln = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.mlp_ln = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, D]; bias [B, 1, 1, T] additive (0, or the dtype's minimum on ignored keys)."""
        b, t, d = x.shape
        h = self.attn_ln(x)
        q, k, v = (
            p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
            for p in (self.attn.query, self.attn.key, self.attn.value)
        )
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.attn.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        d = cfg.n_state
        self.conv1 = nn.Conv1d(cfg.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.positional_embedding = nn.Embedding(cfg.n_ctx, d)
        self.blocks = nn.ModuleList(EncoderBlock(d, cfg.n_head) for _ in range(cfg.n_layer))
        self.avg_pooler = nn.AvgPool1d(2, stride=2)
        self.after_norm = nn.LayerNorm(d)

    def blocks_output(
        self, mels: torch.Tensor, frames: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """mels [B, n_mels, T] (rows zero-padded past `frames`), lengths [B] (the reference's
        x_len) → the last block's output [B, ceil(T / 2), D], before pooling."""
        x = F.gelu(self.conv1(mels))
        x = _zero_past(x.transpose(1, 2), frames).transpose(1, 2)
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # [B, T2, D]
        t2 = x.shape[1]
        if t2 > self.positional_embedding.num_embeddings:
            raise ValueError(f"audio piece of {t2} encoder frames exceeds the encoder's context")
        # Key j of a row is attended when start + 2j < length, start = (F + 1) % 2 for the
        # row's own F (the reference's grid for a row run alone).
        start = (frames + 1) % 2
        grid = start[:, None] + 2 * torch.arange(t2, device=x.device)[None, :]
        keep = grid < lengths[:, None]
        bias = torch.zeros(keep.shape, dtype=x.dtype, device=x.device)
        # finfo.min, not -inf: a row with no key left must not turn into NaN.
        bias = bias.masked_fill(~keep, torch.finfo(x.dtype).min)[:, None, None, :]
        x = x + self.positional_embedding.weight[:t2]
        for block in self.blocks:
            x = block(x, bias)
        return x

    def forward(
        self, mels: torch.Tensor, frames: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """→ pooled, normed features [B, P, D] (zero past each row's own frames) and their
        lengths (length + 1) // 4."""
        x = self.blocks_output(mels, frames, lengths)
        x = _zero_past(x, (frames - 1) // 2 + 1)
        x = self.avg_pooler(x.transpose(1, 2)).transpose(1, 2)
        x = _zero_past(self.after_norm(x), ((frames - 1) // 2 + 1) // 2)
        return x, (lengths + 1) // 2 // 2


class Adapter(nn.Module):
    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        d = cfg.n_state
        self.conv = nn.Conv1d(d, d, cfg.kernel_size, cfg.adapter_stride, padding=1)
        self.linear1 = nn.Linear(d, ADAPTER_STATE)
        self.linear2 = nn.Linear(ADAPTER_STATE, cfg.llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.linear2(F.relu(self.linear1(x)))


def _zero_past(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [B, T, D] with frames t >= lengths[b] set to zero."""
    t = torch.arange(x.shape[1], device=x.device)
    return x * (t[None, :] < lengths[:, None]).to(x.dtype)[:, :, None]


class AudioInput(nn.Module):
    """Encoder + adapter: the model's audio-input stage."""

    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = AudioEncoder(cfg)
        self.adapter = Adapter(cfg)

    @torch.no_grad()
    def embed_pieces(self, mels: list[torch.Tensor]) -> list[torch.Tensor]:
        """Log-mels [n_mels, F_i] → decoder input embeddings [n_i, llm_dim], one batched run."""
        if not mels:
            return []
        p = next(self.parameters())
        frames = torch.tensor([m.shape[1] for m in mels], device=p.device)
        batch = torch.zeros(len(mels), self.cfg.n_mels, int(frames.max()), device=p.device)
        for i, m in enumerate(mels):
            batch[i, :, : m.shape[1]] = m.to(p.device)
        feats, _ = self.encoder(batch.to(p.dtype), frames, frames - 2)
        out = self.adapter(feats)
        counts = [embeddings_of(int(f)) for f in frames]
        return [out[i, :n] for i, n in enumerate(counts)]

    def embed_turns(self, turns_pcm: list[np.ndarray]) -> list[torch.Tensor]:
        """Several turns' audio (16 kHz float32) → each turn's embeddings [n, llm_dim], all
        pieces of all turns in one batched run."""
        pieces = [piece_mels(pcm) for pcm in turns_pcm]
        flat = self.embed_pieces([m for ms in pieces for m in ms])
        out, i = [], 0
        for ms in pieces:
            rows = flat[i : i + len(ms)]
            i += len(ms)
            out.append(torch.cat(rows) if rows else torch.zeros(0, self.cfg.llm_dim))
        return out
