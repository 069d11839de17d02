"""The cached flow estimator with fixed shapes: one chunk's Euler solve over a batch of streams'
cached context, capturable in a CUDA graph (no host syncs, no data-dependent shapes).

estimator_cache.py runs a chunk over each stream's context eagerly: its caches grow by
concatenation and each group of rows has its own shapes, so every job is thousands of kernel
launches. Here the same math runs on tensors of fixed shape per (rows R, context frames L)
bucket:

- the context: per Euler step (S) and attention layer (A), the keys and values [2R, L, D] of
  each row's context frames (CFG's conditional rows 0..R-1, unconditional R..2R-1), with a
  mask [2R, L] saying which of the L slots hold a frame, read from the streams' slots of a
  pool (cache_pool.PoolContext; the tests hand it over whole). The estimator has no
  positional encoding, so key order is free: a stream's context can be a ring.
- the chunk's new frames, T of them, of which `n_new` [R] are real: padding frames after them
  are masked out as keys and dropped from the convolution history (the convolutions are
  causal, so they cannot reach the real frames), which lets a short first chunk or an
  utterance's last part-chunk replay the graph of a whole chunk.
- per Euler step [2R, W]: each causal convolution's last kernel-1 input frames, packed side
  by side (`ConvLayout`).

It returns the chunk's mel and the convolutions' new history, and hands each layer's new keys and
values to the context as soon as that layer has read its own (a pool writes them into its slots
there, so no call holds all S x A layers' of them). tests/models/test_static_cache.py checks it against
estimator_cache.solve_euler_cached, row by row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.codecs.flow_hift.estimator import CausalConditionalDecoder, TransformerBlock
from models.codecs.flow_hift.estimator_cache import (
    ChunkRun,
    _causal_convs,
    heads_attention,
    run_estimator,
)


@dataclass(frozen=True)
class ConvLayout:
    """Where each causal convolution's history sits in a packed [.., W] row: convolution i
    holds channels[i] x history[i] values from offsets[i] (channel-major)."""

    channels: tuple[int, ...]
    history: tuple[int, ...]  # kernel - 1 frames
    offsets: tuple[int, ...]
    width: int

    @classmethod
    def of(cls, estimator: CausalConditionalDecoder) -> ConvLayout:
        convs = _causal_convs(estimator)
        channels = tuple(c.in_channels for c in convs)
        history = tuple(c.kernel_size[0] - 1 for c in convs)
        offsets, at = [], 0
        for c, h in zip(channels, history, strict=True):
            offsets.append(at)
            at += c * h
        return cls(channels, history, tuple(offsets), at)

    def unpack(self, packed: torch.Tensor, i: int) -> torch.Tensor:
        """Convolution i's history [B, C, kernel - 1] from packed [B, W]."""
        lo = self.offsets[i]
        return packed[:, lo : lo + self.channels[i] * self.history[i]].view(
            -1, self.channels[i], self.history[i]
        )

    def pack(self, states: list[torch.Tensor]) -> torch.Tensor:
        """[B, C_i, kernel_i - 1] for each convolution → packed [B, W]."""
        return torch.cat([s.reshape(s.shape[0], -1) for s in states], dim=1)


def attention_shape(estimator: CausalConditionalDecoder) -> tuple[int, int]:
    """(attention layers, key width heads x head_dim) of the estimator."""
    blocks = [m for m in estimator.modules() if isinstance(m, TransformerBlock)]
    return len(blocks), blocks[0].attn1.h * blocks[0].attn1.d


class _StaticRun(ChunkRun):
    """One estimator pass (Euler step `step`) over fixed-shape context."""

    def __init__(
        self,
        context,  # cache_pool.PoolContext (or the tests' DenseContext)
        step: int,
        key_mask: torch.Tensor,  # [2R, 1, 1, L + T] bool: the context's and new frames' keys
        layout: ConvLayout,
        history_at: torch.Tensor,  # [2R] first frame of the new history in cat(history, x)
    ) -> None:
        self.context, self.step, self.key_mask = context, step, key_mask
        self.conv_in, self.layout, self.history_at = context.conv(step), layout, history_at
        self.layer = 0
        self.conv_i = 0
        self.new_conv: list[torch.Tensor] = []

    def conv(self, conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
        i = self.conv_i
        self.conv_i += 1
        state = self.layout.unpack(self.conv_in, i)
        x = torch.cat([state, x], dim=-1)
        # The new history is the last kernel-1 frames up to the last real one (per row).
        h = self.layout.history[i]
        index = self.history_at[:, None, None] + torch.arange(h, device=x.device)
        self.new_conv.append(torch.gather(x, 2, index.expand(-1, x.shape[1], -1)))
        return F.conv1d(x, conv.weight, conv.bias)

    def attend(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys = torch.cat([self.context.keys(self.step, self.layer), k], dim=1)
        values = torch.cat([self.context.values(self.step, self.layer), v], dim=1)
        # Kept at once (a pool writes them into its slots): no step or layer reads this one's
        # context again in this call, and holding every layer's would take S x A of them.
        self.context.keep(self.step, self.layer, k, v)
        self.layer += 1
        return heads_attention(attn, q, keys, values, self.key_mask)


def static_cached_solve(
    flow,
    z: torch.Tensor,
    mu: torch.Tensor,
    spks: torch.Tensor,
    cond: torch.Tensor,
    n_new: torch.Tensor,
    context,
    layout: ConvLayout,
) -> tuple[torch.Tensor, torch.Tensor]:
    """flow.cfg_euler for one chunk of T frames per row over fixed-shape context: z, mu, cond
    [R, M, T]; spks [R, M]; n_new [R] long, the real frames of each row (>= 1); `context`
    (cache_pool.PoolContext): per step and layer the keys and values [2R, L, D],
    `valid` [2R, L] bool, per step the conv history [2R, W], and `keep(step, layer, k, v)` for
    the chunk's own keys and values [2R, T, D] → (mel [R, M, T] float32, the new convolution
    history [S, 2R, W]). Frames past n_new are padding: their mel is garbage and their keys
    must not enter the context."""
    estimator = flow.decoder.estimator
    r, t_frames, dtype = z.shape[0], z.shape[2], mu.dtype
    t_span = flow.t_span.to(dtype)
    rate = flow.cfg.inference_cfg_rate
    mu2 = torch.cat([mu, torch.zeros_like(mu)])
    spks2 = torch.cat([spks, torch.zeros_like(spks)])
    cond2 = torch.cat([cond, torch.zeros_like(cond)])
    n2 = torch.cat([n_new, n_new])
    new_valid = torch.arange(t_frames, device=z.device)[None, :] < n2[:, None]
    key_mask = torch.cat([context.valid, new_valid], dim=1)[:, None, None, :]
    x = z
    convs = []
    for step in range(1, len(t_span)):
        t, dt = t_span[step - 1], t_span[step] - t_span[step - 1]
        run = _StaticRun(context, step - 1, key_mask, layout, n2)
        v = run_estimator(estimator, torch.cat([x, x]), mu2, t.expand(2 * r), spks2, cond2, run)
        convs.append(layout.pack(run.new_conv))
        x = x + dt * ((1.0 + rate) * v[:r] - rate * v[r:])
    return x.float(), torch.stack(convs)
