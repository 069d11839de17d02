"""T3's two classifier-free-guidance rows as one sequence on the paged KV cache.

The conditional and unconditional rows of a request have the same length and the same
positions; they differ only in their text embeddings. So the backbone runs them side by side
([T, 2, H]) and their attention heads are stacked: the cache holds 2 x the KV heads
(conditional ones first), query head i of the stacked 2 x heads reads KV head
i // (heads / kv_heads), which keeps each row's heads on its own keys. One block table, one
scheduling unit, one forward for both rows; the engine sizes the cache from
BackboneShape(num_kv_heads = 2 x kv_heads)."""

from __future__ import annotations

import torch

from models.chatterbox.t3 import T3
from models.layers.rope import apply_rotary


def guided_forward(model: T3, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
    """x [T, 2, H] (each token's conditional and unconditional embeddings) at rotary positions
    [T] → hidden [T, 2, H] after the final norm."""
    backbone = model.backbone
    t = x.shape[0]
    cos, sin = backbone.rotary.cos_sin(positions, x.dtype)
    for layer in backbone.layers:
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q, k, v = a.qkv_proj(h).split([a.h * a.d, a.kvh * a.d, a.kvh * a.d], -1)
        q = apply_rotary(q.reshape(t, 2 * a.h, a.d), cos, sin)
        k = apply_rotary(k.reshape(t, 2 * a.kvh, a.d), cos, sin)
        out = attn.forward(a.layer, q, k, v.reshape(t, 2 * a.kvh, a.d))
        x = x + a.o_proj(out.reshape(t, 2, a.h * a.d))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return backbone.norm(x)
