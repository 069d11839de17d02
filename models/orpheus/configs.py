"""Published and scaled-down Orpheus configurations (HF Llama config.json fields)."""

from __future__ import annotations

from models.orpheus.tokens import AUDIO_END, VOCAB_SIZE

REPO_ID = "canopylabs/orpheus-3b-0.1-ft"
CODEC_REPO_ID = "hubertsiuzdak/snac_24khz"

# canopylabs/orpheus-3b-0.1-ft: Llama 3.2 3B with the audio vocabulary.
ORPHEUS_3B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128009,
    "torch_dtype": "bfloat16",
}

# The same architecture scaled down: a few layers, a small hidden size, the full vocabulary
# (the audio-token offsets depend on it), Llama 3 rope scaling kept so it is exercised.
TINY_ORPHEUS = {
    **ORPHEUS_3B,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}


def is_orpheus_config(cfg: dict) -> bool:
    """A Llama config whose vocabulary holds Orpheus's audio tokens."""
    return cfg.get("model_type") == "llama" and int(cfg.get("vocab_size", 0)) >= AUDIO_END
