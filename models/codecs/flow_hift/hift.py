"""CosyVoice's `HiFTGenerator`: mel → waveform by a neural source-filter HiFi-GAN predicting an
iSTFT's magnitude and phase. Parameter names follow hift.pt (weight-normed convolutions in
torch's parametrization layout; the older `weight_g`/`weight_v` names load too).

Streaming needs two things the reference draws at random to be fixed instead (documented
deviation): the excitation's noise is a hash of the absolute sample index (the reference draws
fresh Gaussian noise per call), and the sine phase is carried across calls (the reference
restarts it per call, which HiFT's cache_source only partly hides)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations, parametrize

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def positional_gaussian(start: torch.Tensor, n: int, channels: int) -> torch.Tensor:
    """N(0, 1) noise [B, n, channels], a pure function of (absolute sample index, channel):
    start [B] int64 is each row's first sample index. Box-Muller over two hashed uniforms."""
    idx = start[:, None, None] + torch.arange(n, device=start.device)[None, :, None]
    key = idx * channels + torch.arange(channels, device=start.device)[None, None, :]
    u1 = (_mix32((key * 2) & _M32).double() + 0.5) / 2.0**32
    u2 = (_mix32((key * 2 + 1) & _M32).double() + 0.5) / 2.0**32
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * torch.pi * u2)).float()


class Snake(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha[None, :, None]
        return x + (1.0 / (a + 1e-9)) * torch.sin(x * a).pow(2)


def _wn(conv: nn.Module) -> nn.Module:
    return parametrizations.weight_norm(conv)


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        pad = lambda d: (kernel * d - d) // 2  # noqa: E731
        self.convs1 = nn.ModuleList(
            _wn(nn.Conv1d(channels, channels, kernel, dilation=d, padding=pad(d)))
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            _wn(nn.Conv1d(channels, channels, kernel, padding=pad(1))) for _ in dilations
        )
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2, a1, a2 in zip(
            self.convs1, self.convs2, self.activations1, self.activations2, strict=True
        ):
            x = x + c2(a2(c1(a1(x))))
        return x


class F0Predictor(nn.Module):
    """ConvRNNF0Predictor: five conv3 + ELU, a linear layer, |.| → f0 per mel frame."""

    def __init__(self, in_channels: int, channels: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [
                _wn(nn.Conv1d(in_channels if i == 0 else channels, channels, 3, padding=1)),
                nn.ELU(),
            ]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.condnet(mel).transpose(1, 2)).squeeze(-1).abs()  # [B, T]


class SourceModule(nn.Module):
    """SourceModuleHnNSF: harmonics of f0 plus noise, merged by a linear + tanh. SineGen2
    (CosyVoice 2) or SineGen (CosyVoice 1, `cfg.sine_gen == 1`; its random per-harmonic start
    phases are zero here, as its noise is position-hashed: streaming needs both fixed)."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.l_linear = nn.Linear(cfg.nb_harmonics + 1, 1)

    def cycle_rates(self, f0: torch.Tensor) -> torch.Tensor:
        """f0 [B, T] → each harmonic's cycles per sample [B, T, H] (float64, mod 1)."""
        cfg = self.cfg
        harmonics = torch.arange(1, cfg.nb_harmonics + 2, device=f0.device, dtype=torch.float64)
        return (f0.double()[..., None] * harmonics / cfg.sampling_rate) % 1

    def forward(
        self, f0: torch.Tensor, phase0: torch.Tensor, start_sample: torch.Tensor
    ) -> torch.Tensor:
        """f0 [B, T] per frame; phase0 [B, H] float64 cycles already run before frame 0;
        start_sample [B] absolute index of the window's first sample → source [B, 1, T*up]."""
        cfg = self.cfg
        up = cfg.samples_per_frame
        rad = self.cycle_rates(f0)  # [B, T, H] cycles/sample
        # Float64 and a carried offset keep the phase exact however long the utterance.
        if cfg.sine_gen == 1:
            # SineGen (CosyVoice 1): f0 repeated to samples, the phase summed per sample.
            per_sample = torch.cumsum(rad.repeat_interleave(up, dim=1), dim=1)
        else:
            # SineGen2: the phase advances by up*rad per frame; its frame values are
            # interpolated linearly to samples (align_corners=False).
            cycles = torch.cumsum(rad, dim=1) * up  # [B, T, H], relative to phase0
            per_sample = F.interpolate(
                cycles.transpose(1, 2), scale_factor=up, mode="linear"
            ).transpose(1, 2)
        sines = (
            cfg.nsf_alpha
            * torch.sin(2 * torch.pi * ((per_sample + phase0[:, None, :]) % 1)).float()
        )
        uv = (
            (f0 > cfg.nsf_voiced_threshold).float().repeat_interleave(up, dim=1)[..., None]
        )  # [B, N, 1]
        noise_amp = uv * cfg.nsf_sigma + (1 - uv) * cfg.nsf_alpha / 3
        noise = noise_amp * positional_gaussian(start_sample, sines.shape[1], sines.shape[2])
        excitation = sines * uv + noise
        return torch.tanh(self.l_linear(excitation.to(self.l_linear.weight.dtype))).transpose(1, 2)

    def frame_cycles(self, f0: torch.Tensor, frames: int) -> torch.Tensor:
        """Phase cycles [B, H] (float64, mod 1) the first `frames` frames of f0 [B, T] run."""
        return (self.cycle_rates(f0[:, :frames]).sum(dim=1) * self.cfg.samples_per_frame) % 1


class HiFTGenerator(nn.Module):
    def __init__(self, cfg) -> None:  # cfg: models.cosyvoice2.config.HiftConfig
        super().__init__()
        self.cfg = cfg
        base = cfg.base_channels
        self.m_source = SourceModule(cfg)
        self.conv_pre = _wn(nn.Conv1d(cfg.in_channels, base, 7, padding=3))
        self.ups = nn.ModuleList(
            _wn(nn.ConvTranspose1d(base // 2**i, base // 2 ** (i + 1), k, u, padding=(k - u) // 2))
            for i, (u, k) in enumerate(
                zip(cfg.upsample_rates, cfg.upsample_kernel_sizes, strict=True)
            )
        )
        n_spec = cfg.n_fft + 2
        rates = [1, *list(cfg.upsample_rates[::-1][:-1])]
        cum = np.cumprod(rates)[::-1]
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i, (u, k, d) in enumerate(
            zip(
                cum,
                cfg.source_resblock_kernel_sizes,
                cfg.source_resblock_dilation_sizes,
                strict=True,
            )
        ):
            ch = base // 2 ** (i + 1)
            u = int(u)
            conv = (
                nn.Conv1d(n_spec, ch, 1)
                if u == 1
                else nn.Conv1d(n_spec, ch, u * 2, u, padding=u // 2)
            )
            self.source_downs.append(conv)
            self.source_resblocks.append(ResBlock(ch, k, d))
        self.resblocks = nn.ModuleList(
            ResBlock(base // 2 ** (i + 1), k, d)
            for i in range(len(self.ups))
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes, strict=True)
        )
        self.conv_post = _wn(nn.Conv1d(base // 2 ** len(self.ups), n_spec, 7, padding=3))
        self.f0_predictor = F0Predictor(cfg.in_channels, cfg.f0_cond_channels)
        self.register_buffer(
            "window", torch.hann_window(cfg.n_fft, periodic=True), persistent=False
        )

    def fold_weight_norm(self) -> None:
        """Bake the weight-norm parametrizations into plain weights (inference only)."""
        for module in self.modules():
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)

    @torch.inference_mode()
    def forward(self, mel: torch.Tensor, phase0: torch.Tensor, start_sample: torch.Tensor):
        """mel [B, M, T] → (audio [B, T*samples_per_frame], f0 [B, T])."""
        f0 = self.f0_predictor(mel)
        source = self.m_source(f0, phase0, start_sample)
        return self.decode(mel, source), f0

    def decode(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        spec = torch.stft(
            source[:, 0].float(),
            cfg.n_fft,
            cfg.hop_len,
            cfg.n_fft,
            window=self.window,
            return_complex=True,
        )
        s = torch.cat([spec.real, spec.imag], dim=1).to(x.dtype)
        x = self.conv_pre(x)
        n_kernels = len(cfg.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, cfg.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s))
            x = sum(self.resblocks[i * n_kernels + j](x) for j in range(n_kernels)) / n_kernels
        x = self.conv_post(F.leaky_relu(x))
        bins = cfg.n_fft // 2 + 1
        magnitude = torch.exp(x[:, :bins]).float().clamp(max=1e2)
        phase = torch.sin(x[:, bins:]).float()
        audio = istft(torch.polar(magnitude, phase), cfg.hop_len, self.window)
        return audio.clamp(-cfg.audio_limit, cfg.audio_limit)


def istft(spec: torch.Tensor, hop: int, window: torch.Tensor) -> torch.Tensor:
    """torch.istft(spec, n_fft, hop, n_fft, window) (centered, one-sided) without its host
    syncs (it checks the window envelope on the host), so HiFT can be captured in a CUDA graph.
    spec [B, n_fft/2 + 1, N] complex → [B, hop * (N - 1)]: inverse FFT per frame, windowed,
    overlap-added and divided by the overlap-added squared window."""
    n_fft, n = window.shape[0], spec.shape[-1]
    frames = torch.fft.irfft(spec, n=n_fft, dim=1) * window[None, :, None]  # [B, n_fft, N]
    length = n_fft + hop * (n - 1)
    fold = dict(output_size=(1, length), kernel_size=(1, n_fft), stride=(1, hop))
    signal = F.fold(frames, **fold)[:, 0, 0]  # [B, length]
    envelope = F.fold((window**2)[None, :, None].expand(1, -1, n), **fold)[:, 0, 0]  # [1, length]
    trim = n_fft // 2  # the centring pad of torch.stft
    return (signal / envelope)[:, trim : length - trim]
