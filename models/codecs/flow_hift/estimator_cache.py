"""CosyVoice 2's flow estimator run one attention chunk at a time over cached context: the math
of a cached detokenizer (cached_flow.py; docs/models.md, "Cached estimator").

Why: the streaming detokenizer (streaming.py) re-integrates each chunk's context chunks with it,
so every steady chunk's 20 estimator passes run over 3x the frames they keep; the solver is ~90 %
of a job. The estimator (estimator.CausalConditionalDecoder) attends in chunks to its own chunk
and every earlier one, and its convolutions are causal. So what a chunk's frames need from the
past, at each Euler step and CFG half, is each attention layer's keys and values of the earlier
frames and each causal convolution's last input frames. Kept per stream (`FlowCache`: one
`PassCache` per Euler step, both CFG halves in its batch), a chunk costs its own frames only,
and the result equals the whole-utterance streaming solve (tests/models/test_estimator_cache.py).

The detokenizer drives it from cached_flow.py (`FlowHiftDetokenizer(..., estimator_cache=True)`),
eagerly so far: the cache pools CUDA graphs need are the next step. This module uses the estimator's own modules and weights;
it only runs them in a different order of frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.codecs.flow_hift.estimator import (
    CausalBlock1D,
    CausalConditionalDecoder,
    TransformerBlock,
)


@dataclass
class PassCache:
    """One estimator pass's context, for a batch (CFG's two halves are rows of it): per
    attention layer the keys and values [B, L, heads * head_dim] of the L earlier frames, per
    causal convolution its last kernel-1 input frames [B, C, kernel - 1]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    convs: list[torch.Tensor]

    @property
    def frames(self) -> int:
        return self.keys[0].shape[1] if self.keys else 0

    def prompt_and_last(self, prompt: int, last: int) -> PassCache:
        """The first `prompt` frames (a voice prompt) and the last `last` ones: a bounded left
        context that always keeps the prompt (the estimator has no positions: key order is
        free)."""

        def cut(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t[:, :prompt], t[:, t.shape[1] - last :]], dim=1)

        return PassCache([cut(k) for k in self.keys], [cut(v) for v in self.values], self.convs)


def empty_pass_cache(estimator: CausalConditionalDecoder, batch: int, device, dtype) -> PassCache:
    """The context before the first frame: no keys, and zeros as the convolutions' history (the
    causal padding CausalConv1d adds)."""
    keys, values, convs = [], [], []
    for module in estimator.modules():
        if isinstance(module, TransformerBlock):
            inner = module.attn1.h * module.attn1.d
            keys.append(torch.zeros(batch, 0, inner, device=device, dtype=dtype))
            values.append(torch.zeros(batch, 0, inner, device=device, dtype=dtype))
    for conv in _causal_convs(estimator):
        convs.append(
            torch.zeros(
                batch, conv.in_channels, conv.kernel_size[0] - 1, device=device, dtype=dtype
            )
        )
    return PassCache(keys, values, convs)


def _causal_convs(estimator: CausalConditionalDecoder) -> list[torch.nn.Conv1d]:
    """The estimator's causal convolutions in the order cached_estimate runs them."""
    convs = []
    for stage in [*estimator.down_blocks, *estimator.mid_blocks, *estimator.up_blocks]:
        resnet = stage[0]
        convs += [resnet.block1.block["0"], resnet.block2.block["0"]]
        if len(stage) > 2:  # down and up stages end with a causal conv
            convs.append(stage[2])
    convs.append(estimator.final_block.block["0"])
    return convs


class ChunkRun:
    """One estimator pass over a chunk's frames whose context comes from elsewhere: a subclass
    says where a causal convolution's history comes from (`conv`) and which keys and values
    the attention sees (`attend`); the rest of the pass is the estimator's own."""

    def conv(self, conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attend(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of the chunk's queries q [B, T, H*D] given its own keys and values → the
        heads' output [B, T, H*D] (before to_out)."""
        raise NotImplementedError

    def block(self, block: CausalBlock1D, x: torch.Tensor) -> torch.Tensor:
        return F.mish(block.block["2"](self.conv(block.block["0"], x)))

    def resnet(self, resnet, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.block(resnet.block1, x) + resnet.mlp["1"](F.mish(temb))[:, :, None]
        return self.block(resnet.block2, h) + resnet.res_conv(x)

    def transformer(self, x: torch.Tensor, blocks) -> torch.Tensor:
        h = x.transpose(1, 2)
        for block in blocks:
            h = self.attention_block(block, h)
        return h.transpose(1, 2)

    def attention_block(self, block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
        attn = block.attn1
        n = block.norm1(x)
        x = x + attn.to_out[0](self.attend(attn, attn.to_q(n), attn.to_k(n), attn.to_v(n)))
        h = block.norm3(x)
        for module in block.ff["net"]:
            h = module(h)
        return x + h


def heads_attention(attn, q, keys, values, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head attention of q [B, T, H*D] over keys, values [B, L, H*D] → [B, T, H*D]."""
    b, t, _ = q.shape
    heads = (b, -1, attn.h, attn.d)
    out = F.scaled_dot_product_attention(
        q.view(b, t, attn.h, attn.d).transpose(1, 2),
        keys.view(*heads).transpose(1, 2),
        values.view(*heads).transpose(1, 2),
        attn_mask=mask,
    )
    return out.transpose(1, 2).reshape(b, t, attn.h * attn.d)


def run_estimator(estimator: CausalConditionalDecoder, x, mu, t, spks, cond, run: ChunkRun):
    """The estimator's U-Net over one chunk's frames with `run`'s context → velocity."""
    temb = estimator.time_mlp(t)
    h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
    skips = []
    for resnet, blocks, conv in estimator.down_blocks:
        h = run.transformer(run.resnet(resnet, h, temb), blocks)
        skips.append(h)
        h = run.conv(conv, h)
    for resnet, blocks in estimator.mid_blocks:
        h = run.transformer(run.resnet(resnet, h, temb), blocks)
    for resnet, blocks, conv in estimator.up_blocks:
        h = torch.cat([h, skips.pop()], dim=1)
        h = run.transformer(run.resnet(resnet, h, temb), blocks)
        h = run.conv(conv, h)
    h = run.block(estimator.final_block, h)
    return estimator.final_proj(h)


class _Run(ChunkRun):
    """One cached estimator pass: consumes the old context in order, collects the new."""

    def __init__(self, cache: PassCache) -> None:
        self.layers: Iterator = iter(zip(cache.keys, cache.values, strict=True))
        self.conv_states: Iterator = iter(cache.convs)
        self.out = PassCache([], [], [])

    def conv(self, conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
        state = next(self.conv_states)
        x = torch.cat([state, x], dim=-1)
        self.out.convs.append(x[:, :, x.shape[-1] - state.shape[-1] :])
        return F.conv1d(x, conv.weight, conv.bias)

    def attend(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        old_k, old_v = next(self.layers)
        k, v = torch.cat([old_k, k], dim=1), torch.cat([old_v, v], dim=1)
        self.out.keys.append(k)
        self.out.values.append(v)
        # The new frames are one attention chunk: each sees all of it and every earlier frame.
        return heads_attention(attn, q, k, v)


def cached_estimate(
    estimator: CausalConditionalDecoder,
    x: torch.Tensor,
    mu: torch.Tensor,
    t: torch.Tensor,
    spks: torch.Tensor,
    cond: torch.Tensor,
    cache: PassCache,
) -> tuple[torch.Tensor, PassCache]:
    """The estimator's velocity for one attention chunk's frames, every one valid: x, mu,
    cond [B, M, T]; t [B]; spks [B, M]; `cache` the context of the frames before them →
    (velocity [B, M, T], the context including them)."""
    run = _Run(cache)
    return run_estimator(estimator, x, mu, t, spks, cond, run), run.out


def solve_euler_cached(
    flow,
    z: torch.Tensor,
    mu: torch.Tensor,
    spks: torch.Tensor,
    cond: torch.Tensor,
    caches: list[PassCache] | None,
) -> tuple[torch.Tensor, list[PassCache]]:
    """flow.cfg_euler for one attention chunk's frames (z, mu, cond [B, M, T]; spks [B, M])
    given `caches` (one PassCache per Euler step, batch 2B: CFG's conditional then
    unconditional half; None: the first chunk) → (mel [B, M, T] float32, the caches including
    this chunk)."""
    estimator = flow.decoder.estimator
    b, dtype = z.shape[0], mu.dtype
    t_span = flow.t_span.to(dtype)
    if caches is None:
        caches = [
            empty_pass_cache(estimator, 2 * b, z.device, dtype) for _ in range(len(t_span) - 1)
        ]
    rate = flow.cfg.inference_cfg_rate
    mu2 = torch.cat([mu, torch.zeros_like(mu)])
    spks2 = torch.cat([spks, torch.zeros_like(spks)])
    cond2 = torch.cat([cond, torch.zeros_like(cond)])
    x, out = z, []
    for step in range(1, len(t_span)):
        t, dt = t_span[step - 1], t_span[step] - t_span[step - 1]
        v, cache = cached_estimate(
            estimator, torch.cat([x, x]), mu2, t.expand(2 * b), spks2, cond2, caches[step - 1]
        )
        out.append(cache)
        x = x + dt * ((1.0 + rate) * v[:b] - rate * v[b:])
    return x.float(), out
