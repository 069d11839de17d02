"""Qwen3-TTS configurations in the published layout: the model's config.json
(`Qwen3TTSConfig`, model_type "qwen3_tts") and speech_tokenizer/config.json
(`Qwen3TTSTokenizerV2Config`, model_type "qwen3_tts_tokenizer_12hz").

The field names, token ids and defaults are those of the qwen-tts package's configuration
classes (qwen_tts/core/models/configuration_qwen3_tts.py, tokenizer_12hz/...). The widths of
the real 0.6B and 1.7B talkers are those the published checkpoints are reported with; a
served checkpoint's own config.json always wins over these (they size `--random-weights`).
"""

from __future__ import annotations

import copy

from models.csm.configs import MIMI, TINY_CSM

REPO_IDS = {
    "qwen3-tts-0.6b": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
    "qwen3-tts-1.7b": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
    "qwen3-tts-1.7b-voice-design": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
    "qwen3-tts-0.6b-base": "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
    "qwen3-tts-1.7b-base": "Qwen/Qwen3-TTS-12Hz-1.7B-Base",
}

# The text side's special ids (Qwen2 tokenizer): chat markers and the TTS text markers.
IM_START, IM_END = 151644, 151645
TTS_PAD, TTS_BOS, TTS_EOS = 151671, 151672, 151673

# Speaker → codec id and language → codec id, as far as they are confirmed from published
# config.json files; a real checkpoint's own config.json carries the full tables (nine
# speakers, ten languages and the dialects), and that is what Voxgate reads when it loads one.
SPEAKERS = {"ryan": 3061, "vivian": 3065, "serena": 3066}
SPEAKER_DIALECTS = {name: False for name in SPEAKERS}
LANGUAGES = {"english": 2050, "chinese": 2055, "french": 2061, "beijing_dialect": 2074}

_MROPE = {"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True}


def _talker(hidden: int, intermediate: int) -> dict:
    return {
        "model_type": "qwen3_tts_talker",
        "vocab_size": 3072,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": _MROPE,
        "attention_bias": False,
        "num_code_groups": 16,
        "text_hidden_size": 2048,
        "text_vocab_size": 151936,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "spk_id": dict(SPEAKERS),
        "spk_is_dialect": dict(SPEAKER_DIALECTS),
        "codec_language_id": dict(LANGUAGES),
        "code_predictor_config": {
            "model_type": "qwen3_tts_talker_code_predictor",
            "vocab_size": 2048,
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 5,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "max_position_embeddings": 65536,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "attention_bias": False,
            "num_code_groups": 16,
        },
    }


def _model(size: str, talker: dict) -> dict:
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_type": "custom_voice",
        "tts_model_size": size,
        "im_start_token_id": IM_START,
        "im_end_token_id": IM_END,
        "tts_pad_token_id": TTS_PAD,
        "tts_bos_token_id": TTS_BOS,
        "tts_eos_token_id": TTS_EOS,
        "talker_config": talker,
    }


QWEN3_TTS_0_6B = _model("0b6", _talker(1024, 3072))
QWEN3_TTS_1_7B = _model("1b7", _talker(2048, 6144))


def voice_design(cfg: dict) -> dict:
    """The VoiceDesign variant of a CustomVoice configuration: the same talker without preset
    speakers (the instruction describes the voice)."""
    out = copy.deepcopy(cfg)
    out["tts_model_type"] = "voice_design"
    out["talker_config"]["spk_id"] = {}
    out["talker_config"]["spk_is_dialect"] = {}
    return out


QWEN3_TTS_1_7B_VOICE_DESIGN = voice_design(QWEN3_TTS_1_7B)

# The speaker encoder's published shape (Qwen3TTSSpeakerEncoderConfig's defaults); its output
# is as wide as the talker (enc_dim = the talker's hidden_size).
SPEAKER_ENCODER = {
    "mel_dim": 128,
    "enc_dim": 1024,
    "enc_channels": [512, 512, 512, 512, 1536],
    "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 128,
    "enc_res2net_scale": 8,
    "enc_se_channels": 128,
    "sample_rate": 24000,
}


def base(cfg: dict, speaker_encoder: dict = SPEAKER_ENCODER) -> dict:
    """The Base variant of a CustomVoice configuration: no preset speakers, a speaker encoder
    whose x-vectors are as wide as the talker."""
    out = voice_design(cfg)
    out["tts_model_type"] = "base"
    width = out["talker_config"]["hidden_size"]
    out["speaker_encoder_config"] = {**speaker_encoder, "enc_dim": width}
    return out


TINY_SPEAKER_ENCODER = {
    **SPEAKER_ENCODER,
    "enc_channels": [32, 32, 32, 32, 96],
    "enc_attention_channels": 16,
    "enc_res2net_scale": 4,
    "enc_se_channels": 16,
}

SPEECH_TOKENIZER = {
    "model_type": "qwen3_tts_tokenizer_12hz",
    # The encoder is a Mimi (transformers' MimiConfig); these are kyutai/mimi's sizes with all
    # 32 codebooks, of which the talker uses the first 16 (encoder_valid_num_quantizers).
    "encoder_config": MIMI,
    "input_sample_rate": 24000,
    "output_sample_rate": 24000,
    "decode_upsample_rate": 1920,
    "encode_downsample_rate": 1920,
    "encoder_valid_num_quantizers": 16,
    "decoder_config": {
        "codebook_size": 2048,
        "codebook_dim": 512,
        "hidden_size": 1024,
        "latent_dim": 1024,
        "max_position_embeddings": 8000,
        "rope_theta": 10000,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "sliding_window": 72,
        "intermediate_size": 3072,
        "hidden_act": "silu",
        "layer_scale_initial_scale": 0.01,
        "rms_norm_eps": 1e-5,
        "num_hidden_layers": 8,
        "num_quantizers": 16,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "decoder_dim": 1536,
    },
}


def _tiny_model() -> dict:
    """The real layout and token ids scaled down in width and depth only: 16 codebooks of 2048,
    the real codec and text vocabularies (every id a prompt uses is the real one)."""
    cfg = copy.deepcopy(QWEN3_TTS_1_7B)
    cfg["tts_model_size"] = "tiny"
    small = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    }
    talker = cfg["talker_config"]
    talker.update(small, text_hidden_size=32)
    talker["rope_scaling"] = {**_MROPE, "mrope_section": [2, 3, 3]}
    talker["code_predictor_config"].update(small)
    return cfg


TINY_QWEN3_TTS = _tiny_model()

# The real frame (1920 samples: upsampling 8·5·4·3 then 2·2) and codebooks; narrow layers.
TINY_SPEECH_TOKENIZER = {
    **SPEECH_TOKENIZER,
    "decoder_config": {
        **SPEECH_TOKENIZER["decoder_config"],
        "codebook_dim": 16,
        "hidden_size": 32,
        "latent_dim": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "sliding_window": 4,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "decoder_dim": 32,
    },
    "encoder_config": TINY_CSM["codec_config"],
}
