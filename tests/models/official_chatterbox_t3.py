"""The official Chatterbox T3 (`chatterbox-tts`, `make reference-deps`) with seeded random
weights, and what the parity tests build around it: Voxgate's T3 loaded from the same weights,
the engine's ChatterboxModel around that T3, and the package's greedy tokens for a request.
Shared by the T3 parity tests (tests/models/test_chatterbox_t3.py) and the per-request
baseline's (tests/bench/test_chatterbox_baseline.py).

The official perceiver is 1024 wide whatever the backbone, so the backbone is too; depth, MLP
and KV heads are scaled down (4 KV heads for 16 query heads: grouped-query attention). The
official sampler has no greedy switch: min_p = 1 keeps only the likeliest token."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import torch
from safetensors.torch import load_file, save_file

from models.chatterbox.config import T3_FACTS
from models.chatterbox.t3 import T3, load_t3
from tests.models.official_chatterbox import import_official

TEST_LLAMA = {
    "vocab_size": 8,
    "max_position_embeddings": 131072,
    "hidden_size": 1024,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "attn_implementation": "eager",
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "mlp_bias": False,
    "model_type": "llama",
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "use_cache": True,
}


def build_official_t3():
    """(the official T3 in eval mode, its T3Cond class, its state dict in the published
    layout); skips the test without the reference."""
    t3_module, configs, cond_module = import_official(
        "chatterbox.models.t3.t3",
        "chatterbox.models.t3.modules.t3_config",
        "chatterbox.models.t3.modules.cond_enc",
    )
    with mock.patch.dict(t3_module.LLAMA_CONFIGS, {"voxgate_test": TEST_LLAMA}):
        hp = configs.T3Config.english_only()
        hp.llama_config_name = "voxgate_test"
        model = t3_module.T3(hp)
    g = torch.Generator().manual_seed(21)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # RMS/LayerNorm gains near one
                p.add_(1.0)
    # The published layout: the state before inference registers its `patched_model` wrapper.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return model.eval(), cond_module.T3Cond, state


def our_t3(state: dict[str, torch.Tensor], folder: Path) -> T3:
    """Voxgate's T3 from the official state, saved as t3_cfg.safetensors in `folder` and
    loaded through Voxgate's loader."""
    path = folder / "t3_cfg.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return load_t3(load_file(str(path)))


def engine_model_around(t3: T3, folder: Path):
    """The engine's ChatterboxModel around `t3` (the tiny preset's S3Gen, tokenizer and voice,
    written in `folder`: only T3's tokens are compared), sampling all 8,194 head rows as the
    official does, its request options as the registry announces them."""
    from models.chatterbox.checkpoint import load_chatterbox
    from models.chatterbox.family import FAMILY
    from models.chatterbox.model import ChatterboxModel
    from models.chatterbox.presets import ensure_tiny_chatterbox
    from models.registry import with_request_options

    parts = load_chatterbox(ensure_tiny_chatterbox(folder))
    parts.t3 = t3
    return with_request_options(ChatterboxModel(parts, constrain_codes=False), FAMILY)


def official_tokens(official, speaker, prompt, text, exaggeration, cfg_weight, n):
    """The official T3.inference's greedy speech tokens (the stop token left out) for one
    request: `official` is build_official_t3()'s triple, `text` the framed text ids."""
    model, T3Cond, _ = official
    cond = T3Cond(
        speaker_emb=speaker[None],
        cond_prompt_speech_tokens=prompt[None],
        emotion_adv=exaggeration * torch.ones(1, 1, 1),
    )
    text_tokens = torch.tensor([text, text])
    tokens = model.inference(
        t3_cond=cond,
        text_tokens=text_tokens,
        max_new_tokens=n,
        temperature=0.8,
        cfg_weight=cfg_weight,
        repetition_penalty=1.2,
        min_p=1.0,
        top_p=1.0,
    )[0].tolist()
    return tokens[:-1] if tokens and tokens[-1] == T3_FACTS.stop_speech else tokens
