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
from models.codecs.slot_states import SCRATCH, SlottedCalls, StateSlots
from models.codecs.stream_batching import buckets_up_to, padded_batch
from models.device_util import download, upload


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
    """One stream's encoder state: transformer steps done, and its row in the encoder's state
    slots (None before its first call)."""

    steps: int = 0
    slot: int | None = None


class MimiStreamEncoder:
    """Per-session audio → Mimi codes, as it arrives; streams given the same number of samples
    share one encoder call. Each stream's state stays in place on the device
    (models/codecs/slot_states.py); with the engine's CUDA graphs (`enable_cuda_graphs`) each
    bucket's one-frame call, quantizer included, is one replay."""

    def __init__(self, mimi, num_quantizers: int) -> None:
        self.encoder = StreamingMimiEncoder(mimi.eval())
        self.num_quantizers = num_quantizers
        self.samples_per_frame = self.encoder.samples_per_frame
        param = next(mimi.parameters())
        self.device, self.dtype = param.device, param.dtype
        with torch.inference_mode():
            fresh = self.encoder.initial_state(1, self.device, self.dtype)
            self.slots = StateSlots([t[0] for t in fresh])
        # Pad each call to a batch bucket (models/codecs/stream_batching.py says why).
        self.pad_batches = self.device.type == "cuda"
        self.calls = SlottedCalls(self.slots)  # replayed from CUDA graphs once captured

    def new_stream(self) -> EncoderStream:
        return EncoderStream()

    @torch.inference_mode()
    def encode(self, streams: list[EncoderStream], audio: list[np.ndarray]) -> list[np.ndarray]:
        """audio[i]: float32 mono, a whole number of frames → codes [frames, num_quantizers]."""
        groups: dict[int, list[int]] = {}
        for i, wave in enumerate(audio):
            groups.setdefault(len(wave), []).append(i)
        out = [np.zeros((0, self.num_quantizers), np.int64) for _ in streams]
        for n, members in groups.items():
            if n == 0:
                continue
            group = [streams[i] for i in members]
            real = len(group)
            batch = padded_batch(real) if self.pad_batches else real
            pad = batch - real  # silent rows on the scratch slot, encoded and dropped
            waves = np.stack([audio[i] for i in members]).astype(np.float32)
            if pad:
                waves = np.concatenate([waves, np.zeros((pad, n), np.float32)])
            rows = [self.slots.bind(s) for s in group] + [SCRATCH] * pad
            inputs = [
                upload(waves[:, None], self.dtype, self.device),  # [B, 1, n]
                upload(rows, torch.long, self.device),
                upload([s.steps for s in group] + [0] * pad, torch.long, self.device),
            ]
            key = ("mimi-encode", batch, n)
            codes = self.calls.run(key, self._encode_call, inputs)
            codes = download(codes[:real])  # [real, frames, K]
            for i, s, stream_codes in zip(members, group, codes, strict=True):
                s.steps += n // self.encoder.hop
                out[i] = stream_codes
        return out

    def _encode_call(self, waves: torch.Tensor, rows: torch.Tensor, steps: torch.Tensor):
        """waves [B, 1, n] → codes [B, frames, K], the rows' state advanced."""
        state = self.slots.gather(rows)
        codes, state = self.encoder.encode_step(waves, steps, state, self.num_quantizers)
        self.slots.scatter(rows, state)
        return codes.transpose(1, 2)

    def enable_cuda_graphs(self, graphs) -> None:
        """Replay each padded batch shape's one-frame call from the engine's CallableGraphs
        once `warm_up_batches` has captured them (the engine calls this first)."""
        self.calls.enable(graphs)

    @torch.inference_mode()
    def warm_up_batches(self, max_batch: int) -> None:
        """Size the state slots for `max_batch` streams and encode one frame at every padded
        batch shape up to it, so no serving tick pays cuDNN's first-use plan building; with
        graphs enabled, capture each shape instead (largest first)."""
        if not self.pad_batches:
            return
        self.slots.size_for(max_batch)
        n = self.samples_per_frame
        for batch in reversed(buckets_up_to(max_batch)):
            inputs = [
                torch.zeros(batch, 1, n, dtype=self.dtype, device=self.device),
                torch.full((batch,), SCRATCH, dtype=torch.long, device=self.device),
                torch.zeros(batch, dtype=torch.long, device=self.device),
            ]
            self.calls.warm(("mimi-encode", batch, n), self._encode_call, inputs)
        self.calls.warmed()
