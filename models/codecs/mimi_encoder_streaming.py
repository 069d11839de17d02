"""Mimi's encoder run frame by frame with explicit per-stream state, batched across streams.

The user's microphone audio of a full-duplex session (Moshi) arrives 80 ms at a time and must
be encoded as it comes, for many sessions at once, each at its own position. Every stateful
piece of transformers' `MimiEncoderModel` carries what it needs of the past:

- causal convolutions (SEANet, strided or not): the last `kernel - stride` input steps (with
  dilation), which stand where the whole encode sees real signal instead of left padding;
- the downsampling convolution pads by repeating its first input ("replicate"): a fresh stream
  starts from that, later calls from the saved tail;
- the windowed encoder transformer: keys/values and positions (`StreamingTransformer`).

Chunks must be whole frames (a multiple of the encoder's total stride, 1920 samples for
kyutai/mimi), so every strided convolution sees whole strides. Then encoding in chunks equals
one whole `MimiModel.encode` up to float rounding (tests/models/test_mimi_encoder.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.mimi_streaming import State, StreamingTransformer
from models.codecs.stream_batching import buckets_up_to, padded_batch, split_states, stack_states
from models.device_util import upload


def _conv_classes():
    from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiResnetBlock

    return MimiConv1d, MimiResnetBlock


class StreamingMimiEncoder(nn.Module):
    """Stateful view of a transformers `MimiModel`'s encoder half. Holds no per-stream data."""

    def __init__(self, mimi) -> None:
        super().__init__()
        conv_cls, _ = _conv_classes()
        encoder = mimi.encoder
        self.seanet = encoder.encoder_seanet
        self.transformer = StreamingTransformer(encoder.encoder_transformer, mimi.config)
        self.downsample = encoder.downsample
        self.quantizer = mimi.quantizer
        self._convs = [m for m in self.seanet.modules() if isinstance(m, conv_cls)]
        for m in self._convs + ([self.downsample] if self.downsample is not None else []):
            if not m.causal or m.pad_mode not in ("constant", "replicate"):
                raise ValueError(
                    "streaming Mimi encoding needs causal convolutions padded with zeros or "
                    f"replication (got causal={m.causal}, pad_mode={m.pad_mode!r})"
                )
        self.hop = 1  # input samples per encoder step before downsampling
        for m in self._convs:
            self.hop *= m.conv.stride[0]
        self.samples_per_frame = self.hop * (
            1 if self.downsample is None else self.downsample.conv.stride[0]
        )

    # --- state -----------------------------------------------------------------------------------
    def initial_state(self, batch: int, device: torch.device, dtype: torch.dtype) -> State:
        state: State = [self._zeros(m, batch, device, dtype) for m in self._convs]
        state += self.transformer.initial_state(batch, device, dtype)
        if self.downsample is not None:
            state.append(self._zeros(self.downsample, batch, device, dtype))
            state.append(torch.ones(batch, device=device, dtype=dtype))  # 1: fresh (replicate)
        return state

    @staticmethod
    def _zeros(layer, batch: int, device, dtype) -> torch.Tensor:
        pad = int(layer.padding_total)
        return torch.zeros(batch, layer.conv.in_channels, pad, device=device, dtype=dtype)

    # --- the step --------------------------------------------------------------------------------
    def encode_step(
        self, audio: torch.Tensor, step0: torch.Tensor, state: State, num_quantizers: int
    ) -> tuple[torch.Tensor, State]:
        """audio [B, 1, n · samples_per_frame]; step0 [B] int64: transformer steps each stream
        has already encoded. Returns codes [B, num_quantizers, n] and the state after them."""
        if audio.shape[-1] % self.samples_per_frame:
            raise ValueError(
                f"encode whole frames: {audio.shape[-1]} samples is not a multiple of "
                f"{self.samples_per_frame}"
            )
        states: Iterator[torch.Tensor] = iter(state)
        conv_states = [next(states) for _ in self._convs]
        new: State = []
        x = self._seanet_step(self.seanet.layers, audio, iter(conv_states), new)
        transformer_new: State = []
        x = self.transformer.step(x.transpose(1, 2), step0, states, transformer_new).transpose(1, 2)
        new += transformer_new
        if self.downsample is not None:
            past, fresh = next(states), next(states)
            if self.downsample.pad_mode == "replicate":
                first = x[..., :1].expand_as(past)
                past = torch.where(fresh[:, None, None] > 0, first, past)
            x = _strided_conv_step(self.downsample.conv, x, past, new)
            new.append(torch.zeros_like(fresh))
        codes = self.quantizer.encode(x, num_quantizers)  # [K, B, n]
        return codes.transpose(0, 1), new

    def _seanet_step(self, layers, x: torch.Tensor, states, new: State) -> torch.Tensor:
        conv_cls, res_cls = _conv_classes()
        for layer in layers:
            if isinstance(layer, conv_cls):
                x = _strided_conv_step(layer.conv, x, next(states), new)
            elif isinstance(layer, res_cls):
                if not isinstance(layer.shortcut, nn.Identity):
                    raise ValueError("streaming Mimi encoding supports identity shortcuts only")
                x = x + self._seanet_step(layer.block, x, states, new)
            else:  # ELU: pointwise
                x = layer(x)
        return x


def _strided_conv_step(
    conv: nn.Conv1d, x: torch.Tensor, past: torch.Tensor, new: State
) -> torch.Tensor:
    """Causal conv of any stride over whole strides: the saved input tail (kernel - stride
    steps) stands in for the left padding, and is the next call's tail once refreshed."""
    full = torch.cat([past, x], dim=-1)
    new.append(full[..., full.shape[-1] - past.shape[-1] :])
    return F.conv1d(full, conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups)


@dataclass
class EncoderStream:
    """One stream's encoder state: transformer steps done, and the carried layer state
    (tensors without the batch dimension; None before the first call)."""

    steps: int = 0
    state: State | None = None


class MimiStreamEncoder:
    """Per-session audio → Mimi codes, as it arrives; streams given the same number of samples
    share one encoder call."""

    def __init__(self, mimi, num_quantizers: int) -> None:
        self.encoder = StreamingMimiEncoder(mimi.eval())
        self.num_quantizers = num_quantizers
        self.samples_per_frame = self.encoder.samples_per_frame
        param = next(mimi.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._fresh: State | None = None
        # Pad each call to a batch bucket (models/codecs/stream_batching.py says why).
        self.pad_batches = self.device.type == "cuda"

    def new_stream(self) -> EncoderStream:
        return EncoderStream()

    @torch.inference_mode()
    def encode(self, streams: list[EncoderStream], audio: list[np.ndarray]) -> list[np.ndarray]:
        """audio[i]: float32 mono, a whole number of frames → codes [frames, num_quantizers]."""
        groups: dict[int, list[int]] = {}
        for i, wave in enumerate(audio):
            groups.setdefault(len(wave), []).append(i)
        out = [np.zeros((0, self.num_quantizers), np.int64) for _ in streams]
        for n, rows in groups.items():
            if n == 0:
                continue
            group = [streams[i] for i in rows]
            waves = np.stack([audio[i] for i in rows]).astype(np.float32)
            if self.pad_batches:  # fresh silent streams, encoded and dropped, fill the bucket
                pad = padded_batch(len(rows)) - len(rows)
                group = group + [EncoderStream() for _ in range(pad)]
                waves = np.concatenate([waves, np.zeros((pad, n), np.float32)])
            waves = torch.from_numpy(waves).to(self.device, self.dtype)[:, None]  # [B, 1, n]
            state = stack_states(group, self._fresh_state())
            steps = upload([s.steps for s in group], torch.long, self.device)
            codes, state = self.encoder.encode_step(waves, steps, state, self.num_quantizers)
            codes = codes.transpose(1, 2).cpu().numpy()  # [B, frames, K]
            split_states(group, state)
            for j, (i, s) in enumerate(zip(rows, group[: len(rows)], strict=True)):
                s.steps += n // self.encoder.hop
                out[i] = codes[j]
        return out

    @torch.inference_mode()
    def warm_up_batches(self, max_batch: int) -> None:
        """Encode one frame at every padded batch shape up to `max_batch` streams, so no
        serving tick pays cuDNN's first-use plan building."""
        if not self.pad_batches:
            return
        silence = np.zeros(self.samples_per_frame, np.float32)
        for batch in buckets_up_to(max_batch):
            self.encode([self.new_stream() for _ in range(batch)], [silence] * batch)

    def _fresh_state(self) -> State:
        if self._fresh is None:
            self._fresh = [t[0] for t in self.encoder.initial_state(1, self.device, self.dtype)]
        return self._fresh
