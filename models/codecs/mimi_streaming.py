"""Mimi's decoder run step by step with explicit state: the stateful pieces of transformers'
`MimiDecoderModel` (causal convs, causal transposed convs, the windowed decoder transformer)
re-driven so that each call continues exactly where the previous one stopped.

transformers' own streaming keeps the decoder transformer's KV cache across calls but pads every
SEANet convolution with zeros again at each call, so decoding frame by frame differs from one
whole decode. Here every layer carries what it needs of the past:

- causal conv (stride 1, all of the decoder's): the last `(kernel - 1) · dilation` input steps,
  which stand where the whole decode would see real signal instead of left padding;
- causal transposed conv (kernel ≤ 2·stride): the `kernel - stride` output steps that spill
  past the end of a chunk (without bias), added to the start of the next chunk's output;
- windowed attention: the keys/values and absolute positions of the last `window - 1` steps.

States are tensors with a leading batch dimension; `initial_state` builds a fresh stream's and
`decode_step` maps (latents, state) → (audio, state) for a batch of streams at once, each at
its own position. The parameters stay transformers' modules, so loading is theirs too.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from models.layers.rope import RopeSpec, Rotary, apply_rotary

State = list[torch.Tensor]  # flat, in decode order; each [B, …]


def _mimi_classes():
    from transformers.models.mimi.modeling_mimi import (
        MimiConv1d,
        MimiConvTranspose1d,
        MimiResnetBlock,
    )

    return MimiConv1d, MimiConvTranspose1d, MimiResnetBlock


def _check_conv(layer) -> None:
    conv = layer.conv
    if not layer.causal or conv.stride[0] != 1 or layer.pad_mode != "constant":
        raise ValueError(
            "streaming Mimi decoding needs causal, stride-1, zero-padded decoder convolutions "
            f"(got causal={layer.causal}, stride={conv.stride[0]}, pad_mode={layer.pad_mode!r}); "
            "this checkpoint's codec config differs from kyutai/mimi"
        )


def _check_conv_transpose(layer) -> None:
    k, s = layer.conv.kernel_size[0], layer.conv.stride[0]
    if not layer.causal or layer.padding_left != 0 or k > 2 * s:
        raise ValueError(
            "streaming Mimi decoding needs causal transposed convolutions trimmed on the right "
            f"with kernel <= 2 * stride (got kernel {k}, stride {s}, trim_right_ratio != 1?)"
        )


class StreamingMimiDecoder(nn.Module):
    """Stateful view of a transformers `MimiModel`'s decoder half (upsample → decoder
    transformer → SEANet decoder). Holds no per-stream data itself."""

    def __init__(self, mimi) -> None:
        super().__init__()
        conv_cls, convt_cls, _ = _mimi_classes()
        decoder = mimi.decoder
        self.upsample = decoder.upsample
        self.transformer = StreamingTransformer(decoder.decoder_transformer, mimi.config)
        self.seanet = decoder.decoder_seanet
        # The SEANet decoder's stateful convolutions; module order is forward order here.
        self._convs = [m for m in self.seanet.modules() if isinstance(m, conv_cls | convt_cls)]
        for m in self._convs:
            (_check_conv if isinstance(m, conv_cls) else _check_conv_transpose)(m)
        if self.upsample is not None:
            _check_conv_transpose(self.upsample)

    # --- state -----------------------------------------------------------------------------------
    def initial_state(self, batch: int, device: torch.device, dtype: torch.dtype) -> State:
        """Zeros everywhere (what causal left padding sees) and no attention history."""
        conv_cls, _, _ = _mimi_classes()
        state: State = []
        if self.upsample is not None:
            state.append(self._tail_zeros(self.upsample, batch, device, dtype))
        state += self.transformer.initial_state(batch, device, dtype)
        for m in self._convs:
            if isinstance(m, conv_cls):
                pad = (m.conv.kernel_size[0] - 1) * m.conv.dilation[0]
                state.append(
                    torch.zeros(batch, m.conv.in_channels, pad, device=device, dtype=dtype)
                )
            else:
                state.append(self._tail_zeros(m, batch, device, dtype))
        return state

    @staticmethod
    def _tail_zeros(layer, batch: int, device, dtype) -> torch.Tensor:
        k, s = layer.conv.kernel_size[0], layer.conv.stride[0]
        return torch.zeros(batch, layer.conv.out_channels, k - s, device=device, dtype=dtype)

    # --- the step --------------------------------------------------------------------------------
    def decode_step(
        self, latents: torch.Tensor, step0: torch.Tensor, state: State
    ) -> tuple[torch.Tensor, State]:
        """latents [B, D, n] (dequantized codes of n new frames); step0 [B] int64: transformer
        steps each stream has already decoded. Returns audio [B, channels, n · frame] and the
        state after these frames."""
        states: Iterator[torch.Tensor] = iter(state)
        new: State = []
        x = latents
        if self.upsample is not None:
            x = _conv_transpose_step(self.upsample.conv, x, next(states), new)
        x = self.transformer.step(x.transpose(1, 2), step0, states, new).transpose(1, 2)
        x = self._seanet_step(self.seanet.layers, x, states, new)
        return x, new

    def _seanet_step(self, layers, x: torch.Tensor, states, new: State) -> torch.Tensor:
        conv_cls, convt_cls, res_cls = _mimi_classes()
        for layer in layers:
            if isinstance(layer, conv_cls):
                x = _conv_step(layer.conv, x, next(states), new)
            elif isinstance(layer, convt_cls):
                x = _conv_transpose_step(layer.conv, x, next(states), new)
            elif isinstance(layer, res_cls):
                if not isinstance(layer.shortcut, nn.Identity):
                    raise ValueError("streaming Mimi decoding supports identity shortcuts only")
                x = x + self._seanet_step(layer.block, x, states, new)
            else:  # ELU: pointwise
                x = layer(x)
        return x


class StreamingTransformer(nn.Module):
    """One of Mimi's windowed transformers (the decoder's, or the encoder's) run step by step:
    its state is the keys/values and absolute positions of the last `window - 1` steps."""

    def __init__(self, transformer, cfg) -> None:
        super().__init__()
        self.layers = transformer.layers
        self.window = int(cfg.sliding_window) if cfg.sliding_window else None
        if self.window is not None and self.window < 2:
            raise ValueError(f"Mimi's sliding_window must be >= 2, got {self.window}")
        self.context = (self.window - 1) if self.window else int(cfg.max_position_embeddings)
        self.num_heads = int(cfg.num_attention_heads)
        self.num_kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(cfg.head_dim)
        # Built beside layers that may already sit on the GPU: its frequencies must follow them.
        device = next(transformer.parameters()).device
        self.rotary = Rotary(RopeSpec.from_hf_config(cfg.to_dict()), self.head_dim).to(device)

    def initial_state(self, batch: int, device: torch.device, dtype: torch.dtype) -> State:
        ctx, hidden = self.context, self.num_kv_heads * self.head_dim
        state: State = []
        for _ in self.layers:
            state.append(torch.zeros(batch, ctx, hidden, device=device, dtype=dtype))  # keys
            state.append(torch.zeros(batch, ctx, hidden, device=device, dtype=dtype))  # values
        state.append(torch.full((batch, ctx), -1, dtype=torch.long, device=device))  # positions
        return state

    def step(self, x: torch.Tensor, step0: torch.Tensor, states, new: State) -> torch.Tensor:
        """x [B, m, D] at steps step0 .. step0+m-1 of each stream."""
        b, m, _ = x.shape
        positions = step0[:, None] + torch.arange(m, device=x.device)  # [B, m]
        cos, sin = self.rotary.cos_sin(positions.reshape(-1), x.dtype)
        cos, sin = cos.view(b, m, -1), sin.view(b, m, -1)
        layers = self.layers
        kv = [(next(states), next(states)) for _ in layers]
        past_pos = next(states)  # [B, ctx]
        key_pos = torch.cat([past_pos, positions], dim=1)  # [B, ctx + m]
        visible = (key_pos[:, None, :] >= 0) & (key_pos[:, None, :] <= positions[:, :, None])
        if self.window is not None:
            visible &= key_pos[:, None, :] > positions[:, :, None] - self.window
        new_kv = []
        for layer, (past_k, past_v) in zip(layers, kv, strict=True):
            h = layer.input_layernorm(x)
            attn, keys, values = self._attention(
                layer.self_attn, h, cos, sin, past_k, past_v, visible
            )
            x = x + layer.self_attn_layer_scale(attn)
            x = x + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(x)))
            new_kv += [keys[:, -self.context :], values[:, -self.context :]]
        new += new_kv
        new.append(key_pos[:, -self.context :])
        return x

    def _attention(self, attn, h, cos, sin, past_k, past_v, visible):
        b, m, _ = h.shape
        hq, hk, d = self.num_heads, self.num_kv_heads, self.head_dim
        q = apply_rotary(attn.q_proj(h).view(b * m, hq, d), cos.flatten(0, 1), sin.flatten(0, 1))
        k = apply_rotary(attn.k_proj(h).view(b * m, hk, d), cos.flatten(0, 1), sin.flatten(0, 1))
        keys = torch.cat([past_k, k.reshape(b, m, hk * d)], dim=1)  # [B, ctx + m, hk·d]
        values = torch.cat([past_v, attn.v_proj(h)], dim=1)
        out = F.scaled_dot_product_attention(
            q.view(b, m, hq, d).transpose(1, 2),
            keys.view(b, -1, hk, d).transpose(1, 2),
            values.view(b, -1, hk, d).transpose(1, 2),
            attn_mask=visible[:, None],
            enable_gqa=hq != hk,
        )
        return attn.o_proj(out.transpose(1, 2).reshape(b, m, hq * d)), keys, values


def _conv_step(conv: nn.Conv1d, x: torch.Tensor, past: torch.Tensor, new: State) -> torch.Tensor:
    """Causal stride-1 conv: the saved input tail stands in for the left padding."""
    full = torch.cat([past, x], dim=-1)
    new.append(full[..., full.shape[-1] - past.shape[-1] :])
    return conv(full)


def _conv_transpose_step(
    conv: nn.ConvTranspose1d, x: torch.Tensor, tail: torch.Tensor, new: State
) -> torch.Tensor:
    """Causal transposed conv: n inputs make n·stride outputs plus `kernel - stride` that
    belong to the next chunk's first outputs. The bias is added once, to the emitted part."""
    y = F.conv_transpose1d(x, conv.weight, None, conv.stride, groups=conv.groups)
    overlap = tail.shape[-1]
    n_out = x.shape[-1] * conv.stride[0]
    y = torch.cat([y[..., :overlap] + tail, y[..., overlap:]], dim=-1)
    new.append(y[..., n_out:])
    out = y[..., :n_out]
    return out if conv.bias is None else out + conv.bias[None, :, None]
