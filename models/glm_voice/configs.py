"""Published and scaled-down GLM-4-Voice configurations (ChatGLM config.json fields)."""

from __future__ import annotations

REPO_ID = "THUDM/glm-4-voice-9b"
TOKENIZER_REPO_ID = "THUDM/glm-4-voice-tokenizer"
DECODER_REPO_ID = "THUDM/glm-4-voice-decoder"

# THUDM/glm-4-voice-9b: GLM-4-9B (ChatGLM layout, `trust_remote_code` model type "chatglm")
# with the vocabulary padded to take 16384 speech tokens <|audio_0|>… after the text ones.
GLM_4_VOICE_9B = {
    "architectures": ["ChatGLMForConditionalGeneration"],
    "model_type": "chatglm",
    "add_bias_linear": False,
    "add_qkv_bias": True,
    "apply_query_key_layer_scaling": True,
    "apply_residual_connection_post_layernorm": False,
    "attention_softmax_in_fp32": True,
    "ffn_hidden_size": 13696,
    "fp32_residual_connection": False,
    "hidden_size": 4096,
    "kv_channels": 128,
    "layernorm_epsilon": 1.5625e-07,
    "multi_query_attention": True,
    "multi_query_group_num": 2,
    "num_attention_heads": 32,
    "num_layers": 40,
    "original_rope": True,
    "padded_vocab_size": 168960,
    "post_layer_norm": True,
    "rmsnorm": True,
    "rope_ratio": 1,
    "seq_length": 8192,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eos_token_id": [151329, 151336, 151338],
    "pad_token_id": 151329,
}

# The same architecture scaled down: two layers, two KV groups kept (multi-query attention is
# the point), a rope_ratio other than 1 so the base scaling is exercised. The vocabulary is
# the tiny tokenizer's (models/glm_voice/tiny_tokenizer.py), not the real 168960.
TINY_GLM_VOICE = {
    **GLM_4_VOICE_9B,
    "ffn_hidden_size": 96,
    "hidden_size": 64,
    "kv_channels": 16,
    "num_attention_heads": 4,
    "multi_query_group_num": 2,
    "num_layers": 2,
    "rope_ratio": 2,
    "seq_length": 4096,
    "torch_dtype": "float32",
}

# THUDM/glm-4-voice-tokenizer: whisper-large-v3's encoder cut at block 16, average-pooled by 4
# after it (50 → 12.5 frames/s), a 16384-entry codebook, causal convolutions, block-causal
# attention over 200-frame (4 s) blocks. The decoder fields are Whisper's and unused here.
GLM_4_VOICE_TOKENIZER = {
    "architectures": ["WhisperVQEncoder"],
    "model_type": "whisper",
    "num_mel_bins": 128,
    "d_model": 1280,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "decoder_layers": 32,
    "decoder_attention_heads": 20,
    "decoder_ffn_dim": 5120,
    "max_source_positions": 1500,
    "activation_function": "gelu",
    "pooling_kernel_size": 4,
    "pooling_type": "avg",
    "pooling_position": 16,
    "quantize_position": 16,
    "quantize_vocab_size": 16384,
    "quantize_encoder_only": True,
    "quantize_causal_encoder": False,
    "quantize_causal_block_size": 200,
    "encoder_causal_attention": False,
    "encoder_causal_convolution": True,
}

# Scaled down: 3 stored blocks of which 2 run (the cut is exercised), real mel bins and pooling,
# 16-frame attention blocks so that block-causality shows on a second of audio.
TINY_GLM_VOICE_TOKENIZER = {
    **GLM_4_VOICE_TOKENIZER,
    "d_model": 32,
    "encoder_layers": 3,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_layers": 1,
    "decoder_attention_heads": 2,
    "decoder_ffn_dim": 64,
    "pooling_position": 2,
    "quantize_position": 2,
    "quantize_causal_block_size": 16,
    # quantize_vocab_size: set to the tiny backbone's speech vocabulary by the preset writer
}

# THUDM/glm-4-voice-decoder's config.yaml sizes (decoder_config.REAL_SIZES) scaled down: narrow
# flow and HiFT, 2 encoder layers with the real 10-token attention blocks, both U-Net levels,
# real 80 mels, 22.05 kHz and 256-sample hop. vocab_size: the tiny speech vocabulary (preset).
TINY_GLM_VOICE_DECODER = {
    "input_size": 32,
    "encoder_dim": 32,
    "encoder_heads": 2,
    "encoder_linear_units": 64,
    "encoder_blocks": 2,
    "block_size": 10,
    "channels": [32, 32],
    "attention_head_dim": 16,
    "n_blocks": 1,
    "num_mid_blocks": 1,
    "num_heads": 2,
    "hift_base_channels": 32,
    "f0_cond_channels": 32,
}
