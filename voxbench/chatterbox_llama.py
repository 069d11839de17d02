"""Chatterbox T3's backbone as transformers' `LlamaModel`, the implementation the per-request
baseline (chatterbox_baseline.py) runs, as the official package runs T3 (`T3.tfmr`, a
`LlamaModel` of its `Llama_520M` configuration).

The checkpoint carries no configuration (the package hard-codes it): the configuration here is
the package's `Llama_520M` with the sizes the engine read off the tensors (T3Sizes, so the tiny
preset builds too), SDPA attention as the package asks. The weights are the engine's loaded T3
backbone in the published layout (`tfmr.*` = LlamaModel's names; the engine's fused q/k/v and
gate/up projections split back by t3_state_dict)."""

from __future__ import annotations

import torch

from models.chatterbox.t3 import BACKBONE, T3, t3_state_dict
from voxbench.hf_models import decoder_config_fields


def t3_llama(t3: T3, device: torch.device, dtype: torch.dtype):
    """transformers' LlamaModel (SDPA, eval) on `device` in `dtype`, holding `t3`'s backbone.
    Its token table (8 unused rows) is loaded too: the baseline feeds it embeddings."""
    from transformers import LlamaConfig, LlamaModel

    args = t3.sizes.llama_args()
    rope = args.rope
    config = LlamaConfig(
        **decoder_config_fields(args),
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": rope.kind,
            "rope_theta": rope.theta,
            "factor": rope.factor,
            "low_freq_factor": rope.low_freq_factor,
            "high_freq_factor": rope.high_freq_factor,
            "original_max_position_embeddings": rope.original_max_positions,
        },
        attn_implementation="sdpa",
    )
    with torch.device(device):
        lm = LlamaModel(config).to(dtype).eval()
    state = {
        name.removeprefix(BACKBONE): tensor
        for name, tensor in t3_state_dict(t3).items()
        if name.startswith(BACKBONE)
    }
    lm.load_state_dict(state, strict=True)
    return lm
