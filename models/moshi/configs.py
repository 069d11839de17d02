"""Moshi configurations as transformers' `MoshiConfig` writes them (config.json of
kmhf/hf-moshiko): the real 7B shape (for `--random-weights` benchmarks) and the tiny preset."""

from __future__ import annotations

from models.csm.configs import MIMI

REPO_ID = "kmhf/hf-moshiko"

# transformers' MoshiConfig defaults are the kmhf/hf-moshika / hf-moshiko shapes: a 7B temporal
# transformer (32 layers of width 4096, gated MLP of 2 x 11264) and a 6-layer depth transformer
# of width 1024 with one set of weights per codebook; kyutai/mimi as the codec, 8 of its 32
# codebooks used.
MOSHI_7B = {
    "architectures": ["MoshiForConditionalGeneration"],
    "model_type": "moshi",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "ffn_dim": 22528,
    "max_position_embeddings": 3000,
    "sliding_window": 3000,
    "rms_norm_eps": 1e-8,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "num_codebooks": 8,
    "audio_vocab_size": 2048,
    "audio_encoder_config": MIMI,
    "depth_decoder_config": {
        "model_type": "moshi_depth",
        "hidden_size": 1024,
        "num_hidden_layers": 6,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 64,
        "ffn_dim": 5632,
        "max_position_embeddings": 9,
        "sliding_window": 8,
        "rms_norm_eps": 1e-8,
    },
}

# Width and depth scaled down only: the real 8 codebooks of 2048 (+1 initial token), the real
# text vocabulary size, the real delays, and a narrow Mimi with the real 1920-sample frame.
TINY_MOSHI = {
    **MOSHI_7B,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "ffn_dim": 256,
    "audio_encoder_config": {
        **MIMI,
        "hidden_size": 32,
        "num_filters": 4,
        "codebook_dim": 16,
        "vector_quantization_hidden_dimension": 16,
        "upsample_groups": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    },
    "depth_decoder_config": {
        **MOSHI_7B["depth_decoder_config"],
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "ffn_dim": 64,
    },
}
