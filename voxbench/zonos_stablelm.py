"""Zonos v0.1 transformer's backbone as transformers' `StableLmModel`, the independent
implementation the per-request baseline (zonos_baseline.py) runs.

StableLM's decoder layer is Zonos' block exactly: LayerNorm (with bias) → grouped-query
attention with rotary over whole heads (theta 10000, no biases) → residual, LayerNorm → gated
SiLU MLP → residual, and a final LayerNorm. Two layouts differ and are converted here:
- Zonos rotates interleaved pairs (dims 2i, 2i + 1) where StableLM rotates halves (i, i + d/2):
  the query and key rows of each head are permuted to put the even dims first, which leaves
  every attention score as it was (values are not rotated and keep their order);
- Zonos' fused `in_proj` splits into q/k/v, and its `fc1` yields the value half first, then the
  gate: those become `up_proj` and `gate_proj`.
"""

from __future__ import annotations

import torch

from models.zonos.backbone import ZonosBackbone

ROPE_THETA = 10000.0


def stablelm_backbone(
    backbone: ZonosBackbone, max_positions: int, device: torch.device, dtype: torch.dtype
):
    """transformers' StableLmModel (SDPA, eval) holding `backbone`'s weights."""
    from transformers import StableLmConfig, StableLmModel

    s = backbone.sizes
    config = StableLmConfig(
        vocab_size=1,  # inputs are embeddings: the baseline never looks tokens up
        hidden_size=s.d_model,
        intermediate_size=s.mlp_hidden,
        num_hidden_layers=s.n_layer,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_kv_heads,
        layer_norm_eps=s.norm_eps,
        max_position_embeddings=max_positions,
        use_qkv_bias=False,
        qk_layernorm=False,
        use_parallel_residual=False,
        partial_rotary_factor=1.0,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
    )
    with torch.device(device):
        lm = StableLmModel(config).to(dtype).eval()
    state = lm.state_dict()
    state.update(_converted(backbone))
    lm.load_state_dict(state)
    if lm.layers[0].self_attn.rotary_ndims != s.head_dim:
        raise RuntimeError("transformers' StableLM did not take a full-head rotary")
    return lm


def _converted(backbone: ZonosBackbone) -> dict[str, torch.Tensor]:
    s = backbone.sizes
    d = s.head_dim
    halves = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])

    def rotated(w: torch.Tensor, heads: int) -> torch.Tensor:
        return w.view(heads, d, -1)[:, halves.to(w.device)].reshape(heads * d, -1)

    out: dict[str, torch.Tensor] = {"norm.weight": backbone.norm_f.weight}
    out["norm.bias"] = backbone.norm_f.bias
    for i, layer in enumerate(backbone.layers):
        m, p = layer.mixer, f"layers.{i}."
        q, k, v = m.in_proj.weight.split([m.h * d, m.kvh * d, m.kvh * d])
        value, gate = layer.mlp.fc1.weight.chunk(2)
        out |= {
            p + "input_layernorm.weight": layer.norm.weight,
            p + "input_layernorm.bias": layer.norm.bias,
            p + "self_attn.q_proj.weight": rotated(q, m.h),
            p + "self_attn.k_proj.weight": rotated(k, m.kvh),
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": m.out_proj.weight,
            p + "post_attention_layernorm.weight": layer.norm2.weight,
            p + "post_attention_layernorm.bias": layer.norm2.bias,
            p + "mlp.up_proj.weight": value,
            p + "mlp.gate_proj.weight": gate,
            p + "mlp.down_proj.weight": layer.mlp.fc2.weight,
        }
    return {k: t.detach() for k, t in out.items()}
