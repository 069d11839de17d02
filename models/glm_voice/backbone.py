"""GLM-4-9B (ChatGLM layout) as the shared Llama-style decoder on the engine's paged KV.

The ChatGLM blocks are Llama blocks with three differences, all covered by models/layers:
q/k/v carry a bias (`add_qkv_bias`), K/V have `multi_query_group_num` heads (grouped-query
attention), and RoPE turns only the first half of each head's dims, as adjacent pairs, with
base 10000 * rope_ratio. ChatGLM already stores q/k/v fused ([q | k | v] rows in
`query_key_value`) and gate/up fused ([gate | up] rows in `dense_h_to_4h`, SwiGLU), exactly
as our `qkv_proj` / `gate_up_proj` are, so loading is a renaming.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from models.checkpoint_errors import CheckpointError
from models.layers.llama import LlamaArgs, LlamaForCausalLM
from models.layers.rope import RopeSpec

# The ChatGLM switches our blocks implement; a checkpoint with other values is another model.
_REQUIRED = {
    "add_bias_linear": False,
    "add_qkv_bias": True,
    "rmsnorm": True,
    "post_layer_norm": True,
    "apply_residual_connection_post_layernorm": False,
}

_LAYER = re.compile(r"^transformer\.encoder\.layers\.(\d+)\.(.+)$")
_LAYER_PARTS = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.query_key_value.weight": "self_attn.qkv_proj.weight",
    "self_attention.query_key_value.bias": "self_attn.qkv_proj.bias",
    "self_attention.dense.weight": "self_attn.o_proj.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.dense_h_to_4h.weight": "mlp.gate_up_proj.weight",
    "mlp.dense_4h_to_h.weight": "mlp.down_proj.weight",
}
_TOP = {
    "transformer.embedding.word_embeddings.weight": "embed_tokens.weight",
    "transformer.encoder.final_layernorm.weight": "norm.weight",
    "transformer.output_layer.weight": "lm_head.weight",
}
# Buffers some ChatGLM checkpoints store; recomputed from the config.
_IGNORED = ("transformer.rotary_pos_emb.inv_freq",)


def glm_args_from_chatglm_config(cfg: dict) -> LlamaArgs:
    """ChatGLM config.json → the decoder's arguments; CheckpointError for what it lacks or
    for switches our blocks do not implement."""
    for key, want in _REQUIRED.items():
        if key in cfg and bool(cfg[key]) != want:
            raise CheckpointError(
                f"ChatGLM config has {key}={cfg[key]!r}; only {want} is supported"
            )
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        head_dim = int(cfg.get("kv_channels") or hidden // heads)
        kv_heads = (
            int(cfg["multi_query_group_num"]) if cfg.get("multi_query_attention", True) else heads
        )
        return LlamaArgs(
            vocab_size=int(cfg["padded_vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["ffn_hidden_size"]),
            num_layers=int(cfg["num_layers"]),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(cfg.get("layernorm_epsilon", 1e-5)),
            # ChatGLM's RotaryEmbedding(dim = head_dim // 2, base = 10000 * rope_ratio):
            # frequencies over the first half of the head, applied to pairs (x0,x1), (x2,x3)…
            rope=RopeSpec(
                theta=10000.0 * float(cfg.get("rope_ratio", 1)),
                rotary_fraction=0.5,
                interleaved=True,
            ),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_positions=int(cfg.get("seq_length", 8192)),
            attention_bias=True,
        )
    except KeyError as missing:
        raise CheckpointError(f"config.json lacks the ChatGLM field {missing}") from None


def our_name(chatglm_name: str) -> str | None:
    """Published ChatGLM tensor name → our parameter name (None: not one of ours)."""
    if chatglm_name in _TOP:
        return _TOP[chatglm_name]
    m = _LAYER.match(chatglm_name)
    if m and m.group(2) in _LAYER_PARTS:
        return f"layers.{m.group(1)}.{_LAYER_PARTS[m.group(2)]}"
    return None


def build_glm_backbone(cfg: dict, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    args = glm_args_from_chatglm_config(cfg)
    with torch.device(device):
        llm = LlamaForCausalLM(args)
    return llm.to(dtype)


def load_chatglm_weights(
    llm: LlamaForCausalLM, weights: Iterable[tuple[str, torch.Tensor]]
) -> None:
    """Copy published ChatGLM tensors into `llm` by name; CheckpointError naming anything
    missing, unexpected or of the wrong shape."""
    params = dict(llm.named_parameters())
    seen: set[str] = set()
    with torch.no_grad():
        for name, tensor in weights:
            if name in _IGNORED:
                continue
            ours = our_name(name)
            if ours is None or ours not in params:
                raise CheckpointError(f"unexpected tensor {name!r} in the GLM-4 checkpoint")
            target = params[ours]
            if tuple(target.shape) != tuple(tensor.shape):
                raise CheckpointError(
                    f"tensor {name!r} has shape {tuple(tensor.shape)}, the config implies "
                    f"{tuple(target.shape)}: checkpoint and config.json do not match"
                )
            target.copy_(tensor)
            seen.add(ours)
    missing = sorted(set(params) - seen)
    if missing:
        shown = ", ".join(missing[:5]) + (f" … ({len(missing)} in all)" if len(missing) > 5 else "")
        raise CheckpointError(f"GLM-4 checkpoint is missing tensors (our names): {shown}")
