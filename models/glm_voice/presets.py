"""The `tiny-glm-voice` preset: THUDM/glm-4-voice-9b's layout (ChatGLM config.json,
model.safetensors under the published ChatGLM names, a tokenizer with GLM-4-Voice's specials)
scaled down with seeded random weights, written once to a cache folder so it loads through the
real loader."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from models.glm_voice import configs
from models.glm_voice.backbone import build_glm_backbone, our_name
from models.glm_voice.tiny_tokenizer import write_tiny_tiktoken, write_tiny_tokenizer
from models.preset_cache import materialise
from models.random_weights import randomise

TINY_VERSION = "v3"  # bump when the tiny config or its weight recipe changes
TINY_NUM_AUDIO = 64  # speech tokens in the tiny vocabulary (the real one has 16384)


def chatglm_names(num_layers: int) -> list[str]:
    """Every tensor name of a ChatGLM checkpoint with `num_layers` blocks (published layout)."""
    names = [
        "transformer.embedding.word_embeddings.weight",
        "transformer.encoder.final_layernorm.weight",
        "transformer.output_layer.weight",
    ]
    parts = (
        "input_layernorm.weight",
        "self_attention.query_key_value.weight",
        "self_attention.query_key_value.bias",
        "self_attention.dense.weight",
        "post_attention_layernorm.weight",
        "mlp.dense_h_to_4h.weight",
        "mlp.dense_4h_to_h.weight",
    )
    names += [f"transformer.encoder.layers.{i}.{p}" for i in range(num_layers) for p in parts]
    return names


def write_glm_checkpoint(
    folder: Path, cfg: dict, seed: int, tokenizer_layout: str = "tokenizer.json"
) -> None:
    """config.json + model.safetensors (ChatGLM names) + the tokenizer into `folder`:
    `tokenizer_layout` "tokenizer.json" (the byte-level stand-in) or "tiktoken" (the published
    glm-4-voice-9b layout: tokenizer.model + tokenizer_config.json, a small trained BPE)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer_layout == "tiktoken":
        vocab = write_tiny_tiktoken(folder, TINY_NUM_AUDIO)
    elif tokenizer_layout == "tokenizer.json":
        vocab = write_tiny_tokenizer(folder, TINY_NUM_AUDIO)
    else:
        raise ValueError(f"tokenizer_layout {tokenizer_layout!r}: 'tokenizer.json' or 'tiktoken'")
    cfg = {**cfg, "padded_vocab_size": -(-vocab // 64) * 64}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    torch.manual_seed(seed)
    params = dict(build_glm_backbone(cfg, torch.device("cpu"), torch.float32).named_parameters())
    tensors = {}
    for name in chatglm_names(int(cfg["num_layers"])):
        shape = params[our_name(name)].shape  # type: ignore[index]
        if "layernorm" in name:  # norms near 1, not exactly, so a mix-up of norms shows
            tensors[name] = 1.0 + 0.1 * torch.randn(shape)
        elif name.endswith("bias"):
            tensors[name] = 0.1 * torch.randn(shape)
        elif "query_key_value" in name:  # sharp attention, so positions (RoPE) steer the output
            tensors[name] = 3.0 * torch.randn(shape) / shape[-1] ** 0.5
        elif "word_embeddings" in name:
            tensors[name] = torch.randn(shape)
        else:
            tensors[name] = torch.randn(shape) / shape[-1] ** 0.5
    save_file(tensors, str(folder / "model.safetensors"))


def write_speech_tokenizer_checkpoint(folder: Path, cfg: dict, seed: int) -> None:
    """THUDM/glm-4-voice-tokenizer's layout: config.json, preprocessor_config.json and
    model.safetensors with the `model.encoder.*` names (plus tensors the loader must skip:
    blocks past the cut, the final layer norm, embed_positions2 and a decoder tensor)."""
    from safetensors.torch import save_file
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    WhisperFeatureExtractor(feature_size=cfg["num_mel_bins"]).save_pretrained(str(folder))
    torch.manual_seed(seed)
    whisper_keys = {k: v for k, v in cfg.items() if k in WhisperConfig().to_dict()}
    encoder = WhisperEncoder(WhisperConfig(**whisper_keys))
    with torch.no_grad():  # norms and biases off their defaults, so a mix-up shows
        for name, p in encoder.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    tensors = {f"model.encoder.{k}": v.clone() for k, v in encoder.state_dict().items()}
    d, pooled = cfg["d_model"], -(-cfg["max_source_positions"] // cfg["pooling_kernel_size"])
    tensors["model.encoder.codebook.weight"] = torch.randn(cfg["quantize_vocab_size"], d)
    tensors["model.encoder.embed_positions2.weight"] = tensors[
        "model.encoder.embed_positions.weight"
    ][:pooled].clone()
    tensors["model.decoder.embed_tokens.weight"] = torch.zeros(4, d)
    save_file(tensors, str(folder / "model.safetensors"))


def ensure_tiny_glm_voice(root: Path | None = None) -> Path:
    """The tiny preset's folder, created on first use: `glm-4-voice-9b/` (backbone),
    `glm-4-voice-tokenizer/` (speech tokenizer) and `glm-4-voice-decoder/` (flow + HiFT),
    in the published layouts."""
    from models.glm_voice.decoder_loading import write_decoder_checkpoint

    def write(folder: Path) -> None:
        write_glm_checkpoint(folder / "glm-4-voice-9b", configs.TINY_GLM_VOICE, seed=2024)
        tokenizer_cfg = {**configs.TINY_GLM_VOICE_TOKENIZER, "quantize_vocab_size": TINY_NUM_AUDIO}
        write_speech_tokenizer_checkpoint(
            folder / "glm-4-voice-tokenizer", tokenizer_cfg, seed=2025
        )
        decoder_sizes = {**configs.TINY_GLM_VOICE_DECODER, "vocab_size": TINY_NUM_AUDIO}
        write_decoder_checkpoint(folder / "glm-4-voice-decoder", decoder_sizes, seed=2026)

    return materialise(f"tiny-glm-voice-{TINY_VERSION}", write, root)


def ensure_real_config(root: Path | None = None) -> Path:
    """glm-4-voice-9b's config.json without its weights (for `--random-weights`), with the
    byte-level stand-in tokenizer (16384 speech tokens) in place of the tiktoken one."""

    def write(staging: Path) -> None:
        folder = staging / "glm-4-voice-9b"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(configs.GLM_4_VOICE_9B, indent=2))
        write_tiny_tokenizer(folder, 16384)

    return materialise(f"glm-4-voice-9b-config-{TINY_VERSION}", write, root) / "glm-4-voice-9b"


def random_glm_voice_9b(device: torch.device, dtype: torch.dtype):
    """GLM-4-Voice-9B with seeded random weights at the published shapes, nothing downloaded,
    for GPU benchmarks: the backbone (glm-4-voice-9b's config.json), the speech tokenizer
    (glm-4-voice-tokenizer's config.json, configs.GLM_4_VOICE_TOKENIZER) and the flow + HiFT
    decoder (glm-4-voice-decoder's config.yaml, decoder_config.REAL_SIZES), so it takes
    spoken turns and speaks. Random weights keep no text/speech mix, so sampling follows the
    trained 13 text : 26 speech blocks (model.TRAINED_INTERLEAVE; a documented benchmark
    deviation). `device` may be the meta device (shapes only)."""
    from models.glm_voice.decoder_loading import random_glm_decoder
    from models.glm_voice.loading import load_glm_tokenizer
    from models.glm_voice.model import TRAINED_INTERLEAVE, GlmVoiceModel
    from models.glm_voice.speech_tokenizer import random_speech_tokenizer

    folder = ensure_real_config()
    torch.manual_seed(0)
    llm = build_glm_backbone(configs.GLM_4_VOICE_9B, device, dtype)
    randomise(llm)
    speech = random_speech_tokenizer(configs.GLM_4_VOICE_TOKENIZER, device, seed=1)
    decoder = random_glm_decoder(device, dtype, seed=2)
    return GlmVoiceModel(
        llm.eval(),
        load_glm_tokenizer(folder),
        decoder,
        "glm-4-voice-9b",
        speech_tokenizer=speech,
        interleave=TRAINED_INTERLEAVE,
    )
