"""T3's two classifier-free-guidance rows as one sequence on the paged KV cache.

The conditional and unconditional rows of a request have the same length and the same
positions; they differ only in their text embeddings. So the backbone runs them side by side
([T, 2, H]) and their attention heads are stacked: the cache holds 2 x the KV heads
(conditional ones first), query head i of the stacked 2 x heads reads KV head
i // (heads / kv_heads), which keeps each row's heads on its own keys. One block table, one
scheduling unit, one forward for both rows; the engine sizes the cache from
BackboneShape(num_kv_heads = 2 x kv_heads). With FlashInfer's fused kernels (beside FlashInfer
attention, bf16: ChatterboxModel.use_fused_kernels) the two rows are 2T rows of the hidden
size for the norms, the MLP and the residual, and 2 x heads at one position for RoPE."""

from __future__ import annotations

import torch

from models.chatterbox.t3 import T3
from models.layers.fused_kernels import FlashInferLlamaKernels
from models.layers.rope import apply_rotary


def guided_forward(
    model: T3,
    x: torch.Tensor,
    positions: torch.Tensor,
    attn,
    kernels: FlashInferLlamaKernels | None = None,
) -> torch.Tensor:
    """x [T, 2, H] (each token's conditional and unconditional embeddings) at rotary positions
    [T] → hidden [T, 2, H] after the final norm."""
    if kernels is not None:
        return _guided_fused(model, x, positions, attn, kernels)
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


def _guided_fused(
    model: T3, x: torch.Tensor, positions: torch.Tensor, attn, kernels: FlashInferLlamaKernels
) -> torch.Tensor:
    """guided_forward with the fused kernels: the residual carried apart and added inside each
    norm (models/layers/llama.py, DecoderLayer.forward_fused), over 2T rows."""
    backbone = model.backbone
    t, width = x.shape[0], x.shape[-1]
    h, residual = x.reshape(2 * t, width).clone(), None  # the residual is updated in place
    for layer in backbone.layers:
        a, mlp = layer.self_attn, layer.mlp
        eps = layer.input_layernorm.eps
        if residual is None:
            residual, h = h, kernels.rmsnorm(h, layer.input_layernorm.weight, eps)
        else:
            h, residual = kernels.add_rmsnorm(h, residual, layer.input_layernorm.weight, eps)
        q, k, v = a.qkv_proj(h.view(t, 2, width)).split([a.h * a.d, a.kvh * a.d, a.kvh * a.d], -1)
        q, k = q.reshape(t, 2 * a.h * a.d), k.reshape(t, 2 * a.kvh * a.d)  # both rows' heads
        kernels.rope_(q, k, positions)
        out = attn.forward(
            a.layer,
            q.view(t, 2 * a.h, a.d),
            k.view(t, 2 * a.kvh, a.d),
            v.reshape(t, 2 * a.kvh, a.d),
        )
        h = a.o_proj(out.reshape(2 * t, a.h * a.d))
        h, residual = kernels.add_rmsnorm(h, residual, layer.post_attention_layernorm.weight, eps)
        h = mlp.down_proj(kernels.silu_mul(mlp.gate_up_proj(h)))
    h, _ = kernels.add_rmsnorm(h, residual, backbone.norm.weight, backbone.norm.eps)
    return h.view(t, 2, width)
