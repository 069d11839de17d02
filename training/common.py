"""What every training stage shares: device choice, a time-budgeted LR schedule, resampling,
and the teacher corpus reader."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on GPUs; plain float32 on the CPU (its bf16 matmuls are slow)."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


class TimeBudget:
    """Linear warm-up over `warmup` steps, then cosine decay to 5% over the wall-clock budget:
    a run stops at its deadline whatever the machine's speed, with the schedule completed."""

    def __init__(
        self, seconds: float, peak_lr: float, warmup: int, max_steps: int | None = None
    ) -> None:
        self.seconds, self.peak, self.warmup, self.max_steps = seconds, peak_lr, warmup, max_steps
        self.start = time.monotonic()
        self.step = 0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def progress(self) -> float:
        by_time = self.elapsed / self.seconds
        by_steps = self.step / self.max_steps if self.max_steps else 0.0
        return min(1.0, max(by_time, by_steps))

    def done(self) -> bool:
        return self.progress >= 1.0

    def lr(self) -> float:
        warm = min(1.0, (self.step + 1) / self.warmup)
        return self.peak * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * self.progress)))

    def apply(self, optimizer: torch.optim.Optimizer) -> float:
        lr = self.lr()
        for group in optimizer.param_groups:
            group["lr"] = lr
        self.step += 1
        return lr


def resample(wave: torch.Tensor, orig: int, new: int, taps_per_side: int = 24) -> torch.Tensor:
    """[..., T] at `orig` Hz → [..., T·new/orig] at `new` Hz: zero-stuff, Kaiser-windowed sinc
    low-pass, decimate (polyphase by strided convolution)."""
    g = math.gcd(orig, new)
    up, down = new // g, orig // g
    if up == down == 1:
        return wave
    cutoff = 0.97 / max(up, down)  # of the upsampled Nyquist
    half = taps_per_side * max(up, down)
    t = torch.arange(-half, half + 1, dtype=torch.float64)
    kernel = (
        cutoff
        * torch.special.sinc(cutoff * t)
        * torch.kaiser_window(2 * half + 1, periodic=False, beta=8.0, dtype=torch.float64)
    )
    kernel = (kernel * up).to(wave.device, torch.float32)
    shape = wave.shape
    x = wave.reshape(-1, 1, shape[-1]).float()
    stuffed = torch.zeros(x.shape[0], 1, shape[-1] * up, device=x.device)
    stuffed[..., ::up] = x
    out = F.conv1d(F.pad(stuffed, (half, half)), kernel.flip(0)[None, None], stride=down)
    return out[..., : shape[-1] * up // down].reshape(*shape[:-1], -1)


@dataclass
class TeacherCorpus:
    audio: np.ndarray  # int16, all utterances back to back
    offsets: np.ndarray  # int64 start sample of each utterance
    lengths: np.ndarray  # int64 samples
    texts: list[str]  # normalised text of each utterance
    rate: int = 16000
    # Flite's phones of each utterance and their end times in seconds from the utterance's first
    # STORED sample (trim already applied; phones trimmed away end before 0). None for corpora
    # made before the teacher recorded phones (or when any shard lacks them).
    phones: list[list[str]] | None = None
    phone_ends: list[np.ndarray] | None = None  # float64 [phones] per utterance

    @classmethod
    def load(cls, folder: Path) -> TeacherCorpus:
        shards = sorted(Path(folder).glob("shard-*.npz"))
        if not shards:
            raise SystemExit(
                f"no teacher shards in {folder}: run `python -m training.teacher` first"
            )
        audio, offsets, lengths, texts, base = [], [], [], [], 0
        phones: list[list[str]] | None = []
        phone_ends: list[np.ndarray] = []
        for path in shards:
            d = np.load(path)
            audio.append(d["audio"])
            offsets.append(d["offsets"] + base)
            lengths.append(d["lengths"])
            texts += json.loads(str(d["texts"]))
            base += len(d["audio"])
            if phones is None or "phones" not in d.files:
                phones = None
                continue
            phones += json.loads(str(d["phones"]))
            shift = d["trim_starts"] / cls.rate  # seconds trim_silence cut from the front
            starts = np.concatenate([[0], np.cumsum(d["phone_counts"])])
            ends = d["phone_ends"].astype(np.float64)
            phone_ends += [
                ends[a:b] - s for a, b, s in zip(starts[:-1], starts[1:], shift, strict=True)
            ]
        return cls(
            np.concatenate(audio),
            np.concatenate(offsets),
            np.concatenate(lengths),
            texts,
            phones=phones,
            phone_ends=phone_ends if phones is not None else None,
        )

    @property
    def hours(self) -> float:
        return float(self.lengths.sum()) / self.rate / 3600


def log_line(path: Path | None, text: str) -> None:
    print(text, flush=True)
    if path is not None:
        with open(path, "a") as f:
            f.write(text + "\n")


def descend(opt: torch.optim.Optimizer, loss: torch.Tensor, module: torch.nn.Module) -> None:
    """One optimiser step on `loss`, the gradient norm clipped to 1 (every stage trains so)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    opt.step()
