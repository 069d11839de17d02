"""The `tiny-orpheus` preset: the real Orpheus layout, scaled down, with seeded random weights,
written once to a cache folder so that it loads through the real loader like any checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from models.codecs.snac_checkpoint import save_snac, tiny_snac_config
from models.layers.llama import LlamaArgs
from models.orpheus.configs import TINY_ORPHEUS
from models.orpheus.tiny_tokenizer import write_tiny_tokenizer
from models.preset_cache import materialise

TINY_VERSION = "v1"  # bump when the tiny config or its weight recipe changes


def random_llama_state(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """HF `LlamaForCausalLM` tensor names and shapes, N(0, 0.02) weights, unit norms.
    Not models/random_weights.randomise: these tensors are drawn in this order from a generator
    of their own, which no module's parameter order reproduces, and tiny-orpheus must keep its
    weights byte for byte (the tests' expectations rest on them)."""
    a = LlamaArgs.from_hf_config(cfg)
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    state = {"model.embed_tokens.weight": normal(a.vocab_size, a.hidden_size)}
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    for i in range(a.num_layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = normal(q, a.hidden_size)
        state[p + "self_attn.k_proj.weight"] = normal(kv, a.hidden_size)
        state[p + "self_attn.v_proj.weight"] = normal(kv, a.hidden_size)
        state[p + "self_attn.o_proj.weight"] = normal(a.hidden_size, q)
        state[p + "mlp.gate_proj.weight"] = normal(a.intermediate_size, a.hidden_size)
        state[p + "mlp.up_proj.weight"] = normal(a.intermediate_size, a.hidden_size)
        state[p + "mlp.down_proj.weight"] = normal(a.hidden_size, a.intermediate_size)
        state[p + "input_layernorm.weight"] = torch.ones(a.hidden_size)
        state[p + "post_attention_layernorm.weight"] = torch.ones(a.hidden_size)
    state["model.norm.weight"] = torch.ones(a.hidden_size)
    if not a.tie_word_embeddings:
        state["lm_head.weight"] = normal(a.vocab_size, a.hidden_size)
    return state


def write_orpheus_checkpoint(folder: Path, cfg: dict, seed: int) -> None:
    """The canopylabs/orpheus-3b-0.1-ft file layout: config.json, model.safetensors, tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(
        random_llama_state(cfg, seed), str(folder / "model.safetensors"), metadata={"format": "pt"}
    )
    write_tiny_tokenizer(folder)


def write_tiny_snac(folder: Path, seed: int) -> None:
    from snac import SNAC

    torch.manual_seed(seed)
    save_snac(SNAC(**tiny_snac_config()), folder)


def ensure_tiny_orpheus(root: Path | None = None) -> tuple[Path, Path]:
    """(model folder, codec folder) of the tiny preset, created on first use. Creation happens
    in a temporary folder renamed into place, so concurrent first uses never see half a
    checkpoint."""

    def write(folder: Path) -> None:
        write_orpheus_checkpoint(folder / "model", TINY_ORPHEUS, seed=1234)
        write_tiny_snac(folder / "codec", seed=4321)

    target = materialise(f"tiny-orpheus-{TINY_VERSION}", write, root)
    return target / "model", target / "codec"
