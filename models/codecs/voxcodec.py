"""VoxCodec: the small neural audio codec of voxgate-tiny (24 kHz, 50 frames/s, finite scalar
quantisation), trained by training/codec.py on the teacher voice.

- Encoder (used for training data only, not streaming): log-mel (100 frames/s) → ConvNeXt
  blocks → stride-2 conv to 50 frames/s → `num_codebooks` groups of FSQ dimensions. Each group
  is one codebook: its code is the mixed-radix number of its quantised levels.
- Decoder (the engine's detokenizer, streaming): codes → causal ConvNeXt blocks at 50 frames/s →
  ×4 transposed conv (kernel == stride: no overlap, no state) → causal blocks at 200 frames/s →
  per sub-frame log-magnitude and phase of a 480-point spectrum → inverse FFT, Hann window,
  overlap-add with hop 120 (Vocos-style: the iFFT does the upsampling to samples, so the decoder
  is cheap on a CPU).

Sub-frame t covers samples [120·t, 120·t + 480): after sub-frames 0..t, every sample before
120·(t+1) is complete. So a frame decodes to exactly 480 new samples and nothing is held back;
the state a stream carries is each causal conv's last `kernel - 1` inputs and the 360-sample
overlap-add tail. `decode(codes, state)` is the one code path for training (state None: zeros)
and streaming, so chunked decoding equals whole decoding up to float summation order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError

MODEL_TYPE = "voxcodec"
# Speech log-mel (natural log, floor 1e-5) is about -6 ± 3: the encoder sees it standardised.
LOG_MEL_MEAN, LOG_MEL_STD = -6.0, 3.0


@dataclass(frozen=True)
class VoxCodecConfig:
    sample_rate: int = 24000
    hop_length: int = 480  # samples per frame: 50 frames/s
    fsq_levels: tuple[int, ...] = (8, 5, 5, 5)  # one codebook: 1000 codes
    num_codebooks: int = 4
    n_mels: int = 80
    mel_fft: int = 1024
    encoder_dim: int = 256
    encoder_blocks: int = 6
    decoder_dim: int = 256
    decoder_blocks: int = 4  # at the frame rate
    upsample: int = 4
    fine_dim: int = 192
    fine_blocks: int = 4  # at frame rate × upsample
    kernel: int = 7
    istft_fft: int = 480  # window of a sub-frame; its hop is hop_length // upsample
    model_type: str = field(default=MODEL_TYPE)

    def __post_init__(self) -> None:
        if self.hop_length % self.upsample or self.istft_fft % (self.hop_length // self.upsample):
            raise CheckpointError("voxcodec config: hop_length / upsample must divide istft_fft")
        if self.istft_fft < self.hop_length // self.upsample:
            raise CheckpointError("voxcodec config: istft_fft must be >= the sub-frame hop")

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop_length

    @property
    def codebook_size(self) -> int:
        return math.prod(self.fsq_levels)

    @property
    def sub_hop(self) -> int:
        return self.hop_length // self.upsample

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fsq_levels"] = list(self.fsq_levels)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> VoxCodecConfig:
        if d.get("model_type") != MODEL_TYPE:
            raise CheckpointError(
                f"codec config has model_type {d.get('model_type')!r}, not {MODEL_TYPE!r}"
            )
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CheckpointError(f"codec config has fields this Voxgate does not know: {unknown}")
        d = dict(d)
        d["fsq_levels"] = tuple(int(x) for x in d.get("fsq_levels", cls.fsq_levels))
        return cls(**d)


class FSQ(nn.Module):
    """Finite scalar quantisation (Mentzer et al. 2023) of `len(levels)` dimensions per group."""

    def __init__(self, levels: tuple[int, ...], groups: int) -> None:
        super().__init__()
        self.groups, self.dims = groups, len(levels)
        self.register_buffer("levels", torch.tensor(levels), persistent=False)
        basis = torch.cumprod(torch.tensor((1,) + tuple(levels[:-1])), 0)
        self.register_buffer("basis", basis, persistent=False)

    def quantize(self, z: torch.Tensor) -> torch.Tensor:
        """z [..., groups·dims] → values on the grid in [-1, 1] (straight-through gradient)."""
        z = z.unflatten(-1, (self.groups, self.dims)).float()
        levels = self.levels.float()
        half = (levels - 1) * (1 - 1e-3) / 2
        offset = torch.where(self.levels % 2 == 0, 0.5, 0.0)
        bounded = torch.tanh(z + torch.atanh(offset / half)) * half - offset
        rounded = bounded + (bounded.round() - bounded).detach()
        return (rounded / (self.levels // 2)).flatten(-2)

    def codes(self, quantized: torch.Tensor) -> torch.Tensor:
        """Grid values [..., groups·dims] → codes [..., groups] (int64)."""
        half = self.levels // 2
        digits = (quantized.unflatten(-1, (self.groups, self.dims)) * half + half).round().long()
        return (digits * self.basis).sum(-1)

    def values(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [..., groups] → grid values [..., groups·dims] (float32)."""
        digits = (codes[..., None] // self.basis) % self.levels
        half = self.levels // 2
        return ((digits - half).float() / half).flatten(-2)


class ConvNeXtBlock(nn.Module):
    """Depthwise conv → norm → pointwise MLP, residual. Causal blocks carry their left context
    (the last `kernel - 1` inputs) as explicit state; non-causal ones pad both sides."""

    def __init__(self, dim: int, kernel: int, causal: bool) -> None:
        super().__init__()
        self.causal, self.kernel = causal, kernel
        self.dwconv = nn.Conv1d(dim, dim, kernel, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 3 * dim)
        self.pw2 = nn.Linear(3 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.1))

    def forward(
        self, x: torch.Tensor, past: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, C, n]; past [B, C, kernel-1] (causal only; None: zeros) → (y, new past)."""
        if self.causal:
            if past is None:
                past = x.new_zeros(x.shape[0], x.shape[1], self.kernel - 1)
            full = torch.cat([past, x], dim=-1)
            h, past = self.dwconv(full), full[..., full.shape[-1] - (self.kernel - 1) :]
        else:
            pad = self.kernel // 2
            h = self.dwconv(F.pad(x, (pad, self.kernel - 1 - pad)))
        h = self.pw2(F.gelu(self.pw1(self.norm(h.transpose(1, 2)))))
        return x + (self.scale * h).transpose(1, 2), past


def mel_filters(sample_rate: int, n_fft: int, n_mels: int) -> torch.Tensor:
    """HTK-scale triangular filters [n_mels, n_fft // 2 + 1], area-normalised."""

    def to_mel(f):
        return 2595 * torch.log10(1 + f / 700)

    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    mels = torch.linspace(0, float(to_mel(torch.tensor(sample_rate / 2.0))), n_mels + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lower) / (center - lower)
    down = (upper - freqs[None]) / (upper - center)
    fb = torch.clamp(torch.minimum(up, down), min=0)
    return fb * (2.0 / (upper - lower))


class LogMel(nn.Module):
    def __init__(self, sample_rate: int, n_fft: int, hop: int, n_mels: int) -> None:
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.register_buffer("filters", mel_filters(sample_rate, n_fft, n_mels), persistent=False)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """wave [B, T] → log-mel [B, n_mels, T // hop + 1] (float32)."""
        spec = torch.stft(
            wave.float(), self.n_fft, self.hop, window=self.window, center=True, return_complex=True
        ).abs()
        return torch.log(torch.clamp(self.filters @ spec, min=1e-5))


class VoxCodec(nn.Module):
    def __init__(self, config: VoxCodecConfig) -> None:
        super().__init__()
        c = self.config = config
        latent = c.num_codebooks * len(c.fsq_levels)
        self.fsq = FSQ(c.fsq_levels, c.num_codebooks)
        # Encoder: the mel hop is half a frame, so one stride-2 conv reaches the frame rate.
        self.mel = LogMel(c.sample_rate, c.mel_fft, c.hop_length // 2, c.n_mels)
        self.enc_in = nn.Conv1d(c.n_mels, c.encoder_dim, c.kernel, padding=c.kernel // 2)
        self.enc_blocks = nn.ModuleList(
            ConvNeXtBlock(c.encoder_dim, c.kernel, False) for _ in range(c.encoder_blocks)
        )
        self.enc_down = nn.Conv1d(c.encoder_dim, c.encoder_dim, 2, stride=2)
        # FSQ bounds its input with tanh: unnormalised latents sit in its flat tails, where the
        # gradient vanishes and every frame rounds to the same code (training collapses to one
        # code this way). Normalising keeps the latents near unit scale.
        self.enc_norm = nn.LayerNorm(c.encoder_dim)
        self.enc_out = nn.Linear(c.encoder_dim, latent)
        # Decoder.
        self.dec_in = nn.Linear(latent, c.decoder_dim)
        self.dec_blocks = nn.ModuleList(
            ConvNeXtBlock(c.decoder_dim, c.kernel, True) for _ in range(c.decoder_blocks)
        )
        self.dec_up = nn.ConvTranspose1d(c.decoder_dim, c.fine_dim, c.upsample, stride=c.upsample)
        self.fine_blocks = nn.ModuleList(
            ConvNeXtBlock(c.fine_dim, c.kernel, True) for _ in range(c.fine_blocks)
        )
        self.head_norm = nn.LayerNorm(c.fine_dim)
        self.head = nn.Linear(c.fine_dim, 2 * (c.istft_fft // 2 + 1))
        self.register_buffer("window", torch.hann_window(c.istft_fft), persistent=False)

    # --- encoder -----------------------------------------------------------------------------------
    def encode_unquantized(self, wave: torch.Tensor) -> torch.Tensor:
        """wave [B, T] (T a multiple of hop_length) → FSQ inputs [B, T // hop, D]."""
        frames = wave.shape[-1] // self.config.hop_length
        mel = (self.mel(wave)[..., : 2 * frames] - LOG_MEL_MEAN) / LOG_MEL_STD
        x = self.enc_in(mel)
        for block in self.enc_blocks:
            x, _ = block(x)
        x = self.enc_down(x).transpose(1, 2)
        return self.enc_out(self.enc_norm(x))

    def encode_latent(self, wave: torch.Tensor) -> torch.Tensor:
        """wave [B, T] (T a multiple of hop_length) → quantised latents [B, T // hop, D]."""
        return self.fsq.quantize(self.encode_unquantized(wave))

    @torch.no_grad()
    def encode(self, wave: torch.Tensor) -> torch.Tensor:
        """wave [B, T] → codes [B, T // hop, num_codebooks] (int64)."""
        return self.fsq.codes(self.encode_latent(wave))

    # --- decoder -----------------------------------------------------------------------------------
    def initial_state(
        self, batch: int, device: torch.device, dtype: torch.dtype
    ) -> list[torch.Tensor]:
        c = self.config
        k = c.kernel - 1
        state = [
            torch.zeros(batch, c.decoder_dim, k, device=device, dtype=dtype)
            for _ in self.dec_blocks
        ]
        state += [
            torch.zeros(batch, c.fine_dim, k, device=device, dtype=dtype) for _ in self.fine_blocks
        ]
        state.append(torch.zeros(batch, c.istft_fft - c.sub_hop, device=device, dtype=dtype))
        return state

    def decode(
        self, codes: torch.Tensor, state: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """codes [B, n, K] → (audio [B, n · hop_length], state after these frames)."""
        return self.decode_latent(self.fsq.values(codes), state)

    def decode_latent(
        self, latent: torch.Tensor, state: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        c = self.config
        dtype = self.dec_in.weight.dtype
        if state is None:
            state = self.initial_state(latent.shape[0], latent.device, dtype)
        past = iter(state)
        new: list[torch.Tensor] = []
        x = self.dec_in(latent.to(dtype)).transpose(1, 2)  # [B, C, n]
        for block in self.dec_blocks:
            x, s = block(x, next(past))
            new.append(s)
        x = self.dec_up(x)  # [B, fine, n · upsample]
        for block in self.fine_blocks:
            x, s = block(x, next(past))
            new.append(s)
        spec = self.head(self.head_norm(x.transpose(1, 2))).float()  # [B, m, 2 · bins]
        log_mag, phase = spec.chunk(2, dim=-1)
        mag = torch.exp(log_mag.clamp(max=6.0))
        frames = torch.fft.irfft(torch.polar(mag, phase), n=c.istft_fft) * self.window  # [B, m, N]
        audio, tail = _overlap_add(frames, c.sub_hop, next(past).float())
        new.append(tail.to(dtype))
        return audio, new


def _overlap_add(
    frames: torch.Tensor, hop: int, tail: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """frames [B, m, N] at hop `hop`, plus the previous call's spill `tail` [B, N - hop] →
    (the m·hop completed samples, the new spill)."""
    b, m, n = frames.shape
    length = (m - 1) * hop + n
    out = F.fold(
        frames.transpose(1, 2), output_size=(1, length), kernel_size=(1, n), stride=(1, hop)
    )
    out = out.view(b, length)
    out = torch.cat([out[:, : n - hop] + tail, out[:, n - hop :]], dim=1)
    return out[:, : m * hop], out[:, m * hop :]
