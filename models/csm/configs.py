"""Published and scaled-down CSM configurations (transformers `CsmConfig` config.json fields)."""

from __future__ import annotations

REPO_ID = "sesame/csm-1b"

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# kyutai/mimi as sesame/csm-1b embeds it (all 32 codebooks).
MIMI = {
    "model_type": "mimi",
    "sampling_rate": 24000,
    "frame_rate": 12.5,
    "hidden_size": 512,
    "num_filters": 64,
    "upsampling_ratios": [8, 6, 5, 4],
    "codebook_size": 2048,
    "codebook_dim": 256,
    "num_quantizers": 32,
    "num_semantic_quantizers": 1,
    "vector_quantization_hidden_dimension": 256,
    "upsample_groups": 512,
    "num_hidden_layers": 8,
    "intermediate_size": 2048,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "sliding_window": 250,
    "use_causal_conv": True,
}

# sesame/csm-1b: Llama-3.2-1B-shaped backbone, 4-layer depth decoder, Mimi with 32 codebooks.
CSM_1B = {
    "architectures": ["CsmForConditionalGeneration"],
    "model_type": "csm",
    "num_codebooks": 32,
    "vocab_size": 2051,  # Mimi's 2048 codes + 3 specials per codebook
    "text_vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_parameters": _LLAMA3_ROPE,
    "bos_token_id": 128000,
    "pad_token_id": 128002,
    "audio_token_id": 128002,
    "audio_eos_token_id": 128003,
    "codebook_pad_token_id": 2050,
    "codebook_eos_token_id": 0,
    "tie_codebooks_embeddings": True,
    "depth_decoder_config": {
        "model_type": "csm_depth_decoder_model",
        "num_codebooks": 32,
        "backbone_hidden_size": 2048,
        "vocab_size": 2051,
        "hidden_size": 1024,
        "intermediate_size": 8192,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "max_position_embeddings": 33,
        "rms_norm_eps": 1e-5,
        "rope_parameters": _LLAMA3_ROPE,
    },
    "codec_config": MIMI,
}

# The same architecture scaled down in width and depth only: 32 codebooks of 2051 (so every
# depth step and code offset is the real one), the real text vocabulary (the tokenizer's ids),
# Llama 3 rope scaling, and a Mimi with the real frame (1920 samples) and codebooks.
TINY_CSM = {
    **CSM_1B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "depth_decoder_config": {
        **CSM_1B["depth_decoder_config"],
        "backbone_hidden_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
    },
    "codec_config": {
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
}
