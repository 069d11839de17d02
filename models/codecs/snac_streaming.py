"""SNAC's decoder run incrementally and exactly: each new frame is computed once, and the audio
streamed equals one decode of the whole utterance (up to float rounding).

Why: the decoder is all symmetric ("same"-padded) convolutions, so a sample depends on inputs
on both sides of it. Decoding windows with a few frames of context each side (the older way)
recomputes those context frames on every call: an 8-frame chunk cost 13 frames of compute, a
single frame 6, and a loaded engine, whose late listeners get single frames, spent most of its
codec time on context. Here every convolution keeps the input samples it still needs (its
state) and outputs only what its inputs so far determine, so a layer of padding p emits its
output p samples late; the delays add up through the layers to `delay_samples` (4757 samples,
2.32 frames, for snac_24khz). Audio comes out once its whole receptive field is in: a stream's
first samples need 3 frames, then every frame pushed yields 2048 more.

How:
- a frame's 7 codes make its 4 latent steps alone (the quantizer's strides 4/2/1 repeat within
  the frame), so the latent needs no state;
- conv (kernel k, dilation d, padding p = (k-1)d/2): state = its last (k-1)d inputs; a call's n
  inputs give n outputs, p samples late;
- transposed conv (stride s, kernel 2s, padding P): state = its last input; n inputs give n*s
  outputs, P samples late;
- residual unit: its block's delay p, and a p-sample delay line on the skip path;
- noise (PositionalNoise): the noise of each output sample's absolute position;
- masks: a layer's outputs at positions before the stream (the delay's first samples) or after
  its end (a final flush) are zeroed, standing in for the zero padding a whole decode sees; the
  activations (snake, tanh) and noise keep zeros zero, so masking after each convolution
  (whose bias would fill the padding) suffices. A final flush feeds frames of zeros past the end to push the last samples out.

States live in pools, one tensor per stateful layer with a row per stream slot; a call gathers
its rows' states by slot and scatters them back, so one call is one fixed-shape computation
that a CUDA graph captures (the slots are inputs). Slot 0 is scratch: padding rows of a graph's
batch use it. A row whose start is 0 begins from zero state, so a slot needs no reset when a
new stream takes it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from snac import SNAC
from snac.layers import DecoderBlock, ResidualUnit, Snake1d
from torch import nn

from models.codecs.snac_noise import PositionalNoise, positional_normal

# A stream's end when it has not ended yet (latent steps): past anything a stream reaches.
OPEN_END = 2**40


@dataclass
class _Rows:
    """Per-call, per-row inputs every layer reads."""

    start: torch.Tensor  # [B] int64: latent steps the stream had fed before this call
    end: torch.Tensor  # [B] int64: the stream's length in latent steps (OPEN_END: not ended)
    seed: torch.Tensor  # [B] int64: noise seed
    slots: torch.Tensor  # [B] int64: state pool rows
    fresh: torch.Tensor  # [B, 1, 1]: 0 for rows starting a stream (state begins at zero)


class _StatePool:
    """One stateful layer's state for every slot: [slots, channels, length]."""

    def __init__(self, slots: int, channels: int, length: int, like: torch.Tensor) -> None:
        self.length = length
        self.data = torch.zeros(slots, channels, length, dtype=like.dtype, device=like.device)

    def extend(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        """The rows' state followed by `x` along time; the last `length` samples become the
        new state."""
        state = self.data.index_select(0, rows.slots) * rows.fresh
        buffer = torch.cat([state, x], dim=-1)
        self.data.index_copy_(0, rows.slots, buffer[..., buffer.shape[-1] - self.length :])
        return buffer


class _Layer:
    """One step of the decoder in stream form. `rate`: samples per latent step at its output;
    `delay`: how many of its own output samples it runs behind its input, all layers before
    included (the caller sets both while building)."""

    rate = 1
    delay = 0

    def positions(self, n: int, rows: _Rows) -> torch.Tensor:
        """[B, n] absolute positions of this call's n output samples."""
        first = rows.start * self.rate - self.delay
        return first[:, None] + torch.arange(n, device=first.device)

    def mask(self, y: torch.Tensor, rows: _Rows) -> torch.Tensor:
        """Zero the outputs before the stream's start or past its end."""
        pos = self.positions(y.shape[-1], rows)
        valid = (pos >= 0) & (pos < (rows.end * self.rate)[:, None])
        return y * valid[:, None, :].to(y.dtype)

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        raise NotImplementedError


class _Pointwise(_Layer):
    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        return self.module(x)


class _Conv(_Layer):
    def __init__(self, conv: nn.Conv1d, slots: int, like: torch.Tensor) -> None:
        k, d, p = conv.kernel_size[0], conv.dilation[0], conv.padding[0]
        if conv.stride[0] != 1 or 2 * p != (k - 1) * d:
            raise ValueError(f"cannot stream {conv}: only stride-1 'same'-padded convs stream")
        self.conv, self.own_delay = conv, p
        self.pool = _StatePool(slots, conv.in_channels, (k - 1) * d, like) if k > 1 else None

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        if self.pool is None:  # 1 x 1: no state, but its bias must not fill the padding
            return self.mask(self.conv(x), rows)
        buffer = self.pool.extend(x, rows)
        y = nn.functional.conv1d(
            buffer,
            self.conv.weight,
            self.conv.bias,
            dilation=self.conv.dilation,
            groups=self.conv.groups,
        )
        return self.mask(y, rows)


class _ConvTranspose(_Layer):
    def __init__(self, conv: nn.ConvTranspose1d, slots: int, like: torch.Tensor) -> None:
        s, k = conv.stride[0], conv.kernel_size[0]
        if k != 2 * s or conv.dilation[0] != 1:
            raise ValueError(f"cannot stream {conv}: only kernel = 2 x stride streams")
        self.conv, self.stride, self.own_delay = conv, s, conv.padding[0]
        self.pool = _StatePool(slots, conv.in_channels, 1, like)

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        n, s = x.shape[-1], self.stride
        buffer = self.pool.extend(x, rows)  # the previous input, then the n new ones
        full = nn.functional.conv_transpose1d(buffer, self.conv.weight, self.conv.bias, stride=s)
        # Full outputs [s, (n + 1) s) have every input that touches them (inputs i reach
        # [i s, i s + 2 s)); the ones before miss an input older than the state.
        return self.mask(full[..., s : (n + 1) * s], rows)


class _Noise(_Layer):
    def __init__(self, noise: PositionalNoise) -> None:
        self.noise = noise

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        first = rows.start * self.rate - self.delay
        z = positional_normal(rows.seed, self.noise.salt, first, x.shape[-1])
        return x + z[:, None, :].to(x.dtype) * self.noise.linear(x)


class _Residual(_Layer):
    def __init__(self, unit: ResidualUnit, slots: int, like: torch.Tensor) -> None:
        self.block = [_layer(m, slots, like) for m in unit.block]
        self.own_delay = sum(getattr(layer, "own_delay", 0) for layer in self.block)
        channels = unit.block[1].in_channels
        self.skip = _StatePool(slots, channels, self.own_delay, like) if self.own_delay else None

    def place(self, rate: int, delay: int) -> None:
        for layer in self.block:
            delay += getattr(layer, "own_delay", 0)
            layer.rate, layer.delay = rate, delay

    def __call__(self, x: torch.Tensor, rows: _Rows) -> torch.Tensor:
        y = x
        for layer in self.block:
            y = layer(y, rows)
        if self.skip is None:
            return x + y
        return self.skip.extend(x, rows)[..., : x.shape[-1]] + y


def _layer(module: nn.Module, slots: int, like: torch.Tensor) -> _Layer:
    if isinstance(module, (Snake1d, nn.Tanh)):
        return _Pointwise(module)
    if isinstance(module, nn.Conv1d):
        return _Conv(module, slots, like)
    if isinstance(module, nn.ConvTranspose1d):
        return _ConvTranspose(module, slots, like)
    if isinstance(module, PositionalNoise):
        return _Noise(module)
    if isinstance(module, ResidualUnit):
        return _Residual(module, slots, like)
    raise ValueError(
        f"cannot stream SNAC decoder layer {type(module).__name__}: the streaming decoder knows "
        "snac_24khz's layers (no local attention)"
    )


class StreamingSnacDecoder:
    """Exact incremental decode of a SNAC model's decoder for up to `max_streams` streams at
    once (each holds a slot while it lives: `acquire` / `release`). The model must have
    positional noise installed (models/codecs/snac_noise.py) and its weight norm folded."""

    def __init__(self, model: SNAC, max_streams: int) -> None:
        if model.attn_window_size is not None:
            raise ValueError(
                "streaming SNAC needs a model without local attention (attn_window_size null, "
                "as snac_24khz): windowed attention depends on where a window starts"
            )
        self.model = model
        like = next(model.parameters())
        slots = max_streams + 1  # slot 0: scratch for padding rows
        self.layers: list[_Layer] = []
        for module in model.decoder.model:
            if isinstance(module, DecoderBlock):
                self.layers += [_layer(m, slots, like) for m in module.block]
            else:
                self.layers.append(_layer(module, slots, like))
        rate, delay = 1, 0
        for layer in self.layers:
            if isinstance(layer, _ConvTranspose):
                rate, delay = rate * layer.stride, delay * layer.stride
            delay += getattr(layer, "own_delay", 0)
            layer.rate, layer.delay = rate, delay
            if isinstance(layer, _Residual):
                layer.place(rate, delay - layer.own_delay)
        self.samples_per_latent = rate
        self.delay_samples = delay
        self._free = list(range(max_streams, 0, -1))
        self._lock = threading.Lock()

    # --- slots -----------------------------------------------------------------------------
    def acquire(self) -> int:
        """A free slot for a new stream; RuntimeError when all are taken."""
        with self._lock:
            if not self._free:
                raise RuntimeError(
                    "every SNAC stream slot is taken: more streams are live than the "
                    "detokenizer was sized for (max_streams); raise it or serve fewer at once"
                )
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._lock:
            self._free.append(slot)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    # --- decoding ----------------------------------------------------------------------------
    def step(
        self,
        codes: torch.Tensor,
        start: torch.Tensor,
        end: torch.Tensor,
        seed: torch.Tensor,
        slots: torch.Tensor,
    ) -> torch.Tensor:
        """codes [B, n, 7] (n new frames a row, SNAC order) → audio [B, n * samples_per_frame]
        at absolute positions start * samples_per_latent - delay_samples onward; `start`, `end`
        in latent steps (4 a frame). Fixed shapes and no host syncs: traceable into a CUDA
        graph."""
        b = codes.shape[0]
        levels = [codes[:, :, 0], codes[:, :, 1:3], codes[:, :, 3:7]]
        z = self.model.quantizer.from_codes([c.reshape(b, -1) for c in levels])  # [B, C, 4n]
        rows = _Rows(start, end, seed, slots, (start > 0).to(z.dtype)[:, None, None])
        latent = _Layer()
        x = latent.mask(z, rows)
        for layer in self.layers:
            x = layer(x, rows)
        return x[:, 0]
