"""Published and scaled-down Step-Audio 2 configurations (config.json fields).

stepfun-ai/Step-Audio-2-mini's config.json (model_type "step_audio_2") has two sections: an
`audio_encoder_config` (the Whisper-style encoder and the adapter: n_mels, n_audio_ctx,
n_audio_state, n_audio_head, n_audio_layer, llm_dim, kernel_size, adapter_stride) and a
`text_config` (a Qwen2.5-7B-shaped decoder, Qwen2 field names). Some exports put the decoder
fields at the top level instead; the loader accepts both (config.text_fields)."""

from __future__ import annotations

REPO_ID = "stepfun-ai/Step-Audio-2-mini"

# The audio encoder: whisper-large-v3's encoder shape (1280 wide, 20 heads, 32 blocks, 1500
# positions after the stride-2 conv), then a stride-2 average pool (25 frames/s); the adapter's
# stride-2 conv takes it to 12.5 embeddings/s of the decoder's width.
STEP_AUDIO_2_MINI_AUDIO = {
    "n_mels": 128,
    "n_audio_ctx": 1500,
    "n_audio_state": 1280,
    "n_audio_head": 20,
    "n_audio_layer": 32,
    "llm_dim": 3584,
    "kernel_size": 3,
    "adapter_stride": 2,
}

# Qwen2.5-7B's decoder with the vocabulary grown to 158720: text and specials, then the 6562
# speech tokens <audio_0>…<audio_6561> (6561 CosyVoice 2 codes and one padding code).
STEP_AUDIO_2_MINI_TEXT = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 158720,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

STEP_AUDIO_2_MINI = {
    "architectures": ["StepAudio2ForCausalLM"],
    "model_type": "step_audio_2",
    "audio_encoder_config": STEP_AUDIO_2_MINI_AUDIO,
    "text_config": STEP_AUDIO_2_MINI_TEXT,
    "torch_dtype": "bfloat16",
}

# Scaled down: 2 encoder blocks of width 32 (real mel bins, strides and kernel), a 2-layer
# decoder with grouped-query attention (4 heads, 2 KV heads) and attention biases. The
# vocabulary is the tiny tokenizer's (presets.py), not the real 158720.
TINY_STEP_AUDIO2_AUDIO = {
    **STEP_AUDIO_2_MINI_AUDIO,
    "n_audio_ctx": 1500,
    "n_audio_state": 32,
    "n_audio_head": 2,
    "n_audio_layer": 2,
    "llm_dim": 64,
}
TINY_STEP_AUDIO2_TEXT = {
    **STEP_AUDIO_2_MINI_TEXT,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    # vocab_size: the tiny tokenizer's, set by the preset writer
}
TINY_STEP_AUDIO2 = {
    **STEP_AUDIO_2_MINI,
    "audio_encoder_config": TINY_STEP_AUDIO2_AUDIO,
    "text_config": TINY_STEP_AUDIO2_TEXT,
    "torch_dtype": "float32",
}
