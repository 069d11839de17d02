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
