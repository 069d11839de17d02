"""The `tiny-step-audio2` preset: stepfun-ai/Step-Audio-2-mini's layout (config.json with
`audio_encoder_config` + `text_config`, model.safetensors under the published names,
tokenizer.json with Step-Audio 2's specials and <audio_i> tokens) scaled down with seeded random
weights, plus a token2wav folder (Step-Audio 2's own layout: flow.yaml with the DiT flow
estimator, flow.pt, hift.pt; token2wav.py), written
once to a cache folder so it loads through the real loader. And the real configuration
without weights for `step-audio2-mini --random-weights`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from models.preset_cache import materialise
from models.step_audio2 import configs
from models.step_audio2 import tokens as T

TINY_VERSION = "v3"  # bump when the tiny config or its weight recipe changes
NUM_AUDIO_TOKENS = T.NUM_CODES + 1  # <audio_0>…<audio_6561>: the codes and the filler
SPECIALS = (
    "<|endoftext|>",
    T.BOT,
    T.EOT,
    T.AUDIO_START,
    T.AUDIO_END,
    T.AUDIO_PATCH,
    T.TTS_START,
    T.TTS_END,
    T.TTS_PAD,
)


def write_tokenizer(folder: Path, extra_tokens: Sequence[str] = ()) -> int:
    """A byte-level tokenizer.json (every UTF-8 byte one token, no merges) with Step-Audio
    2's specials and speech tokens, in the real vocabulary's order (text, specials, speech),
    then `extra_tokens` as ordinary added text tokens (tests use them, e.g. `<tool_call>`, which
    the real vocabulary has as one token). Returns the vocabulary size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from models.byte_level import byte_alphabet

    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    names = [*SPECIALS, *(T.audio_token(i) for i in range(NUM_AUDIO_TOKENS))]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra_tokens])
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def write_checkpoint(folder: Path, cfg: dict, seed: int, extra_tokens: Sequence[str] = ()) -> dict:
    """config.json + model.safetensors (published names) + tokenizer.json (with
    `extra_tokens`, see write_tokenizer) into `folder`; returns the config written."""
    from safetensors.torch import save_file

    from models.step_audio2.loading import build_parts

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(folder, extra_tokens)
    cfg = {**cfg, "text_config": {**cfg["text_config"], "vocab_size": -(-vocab // 64) * 64}}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    torch.manual_seed(seed)
    llm, audio = build_parts(cfg, torch.device("cpu"), torch.float32)
    tensors = {}
    for name, p in llm.named_parameters():
        tensors[name] = _weight(name, p.shape)
    for name, p in audio.named_parameters():
        tensors[name] = _weight(name, p.shape)
    save_file(_published_names(tensors, llm), str(folder / "model.safetensors"))
    return cfg


def _weight(name: str, shape: torch.Size) -> torch.Tensor:
    """Random weights scaled so that a 2-layer model's greedy tokens depend on every part."""
    if "norm" in name or name.endswith("_ln.weight"):  # near 1, so a mix-up of norms shows
        return 1.0 + 0.1 * torch.randn(shape)
    if name.endswith("bias"):
        return 0.1 * torch.randn(shape)
    if "qkv_proj" in name:  # sharp attention, so positions (RoPE) steer the output
        return 3.0 * torch.randn(shape) / shape[-1] ** 0.5
    if "embed_tokens" in name or "positional_embedding" in name:
        return torch.randn(shape)
    fan_in = int(torch.tensor(shape[1:]).prod()) if len(shape) > 1 else shape[0]
    return torch.randn(shape) / fan_in**0.5


def _published_names(tensors: dict[str, torch.Tensor], llm) -> dict[str, torch.Tensor]:
    """Our decoder names (fused qkv / gate_up) → HF Qwen2's (`model.*`, `lm_head.weight`);
    the audio stage's names are already the published ones."""
    a = llm.args
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    out = {}
    for name, t in tensors.items():
        if name.startswith(("encoder.", "adapter.")) or name == "lm_head.weight":
            out[name] = t.contiguous()
        elif ".qkv_proj." in name:
            stem, leaf = name.split(".qkv_proj.")
            for part, piece in zip(
                ("q_proj", "k_proj", "v_proj"), t.split([q, kv, kv]), strict=True
            ):
                out[f"model.{stem}.{part}.{leaf}"] = piece.contiguous()
        elif ".gate_up_proj." in name:
            stem, leaf = name.split(".gate_up_proj.")
            for part, piece in zip(("gate_proj", "up_proj"), t.chunk(2), strict=True):
                out[f"model.{stem}.{part}.{leaf}"] = piece.contiguous()
        else:
            out[f"model.{name}"] = t.contiguous()
    return out


def write_token2wav(folder: Path, seed: int) -> None:
    """Step-Audio-2-mini's token2wav layout (flow.yaml with the DiT estimator, flow.pt,
    hift.pt) at tiny sizes with seeded random weights, plus one spk2info.pt speaker for its
    voice (the published folder has no speaker; its two ONNX prompt models are left out)."""
    from models.codecs.flow_hift.audible_weights import make_audible
    from models.codecs.flow_hift.flow import CausalFlow
    from models.codecs.flow_hift.hift import HiFTGenerator
    from models.step_audio2 import token2wav_config as T2W

    folder.mkdir(parents=True, exist_ok=True)
    (folder / T2W.FLOW_FILE).write_text(T2W.flow_yaml(T2W.TINY_SIZES))
    cfg = T2W.load_flow_config(folder)
    torch.manual_seed(seed)
    flow = CausalFlow(cfg)
    with torch.no_grad():  # pos_bias_* start at zero; random values exercise the attention path
        for name, p in flow.named_parameters():
            if "pos_bias" in name:
                p.normal_(0.0, 0.1)
    torch.save(flow.state_dict(), folder / "flow.pt")
    hift = make_audible(HiFTGenerator(T2W.hift_config(*T2W.TINY_HIFT)))
    # The published hift.pt carries the HiFiGan training wrapper's prefix.
    torch.save({f"generator.{k}": v for k, v in hift.state_dict().items()}, folder / "hift.pt")
    speaker = {"default": {"embedding": torch.randn(1, cfg.spk_embed_dim)}}
    torch.save(speaker, folder / "spk2info.pt")


def ensure_tiny_step_audio2(root: Path | None = None) -> Path:
    """The tiny preset's checkpoint folder (with `token2wav/` inside), made on first use."""

    def write(staging: Path) -> None:
        folder = staging / "Step-Audio-2-mini"
        write_checkpoint(folder, configs.TINY_STEP_AUDIO2, seed=2033)
        write_token2wav(folder / "token2wav", seed=2034)

    return materialise(f"tiny-step-audio2-{TINY_VERSION}", write, root) / "Step-Audio-2-mini"


def ensure_real_config(root: Path | None = None) -> Path:
    """Step-Audio-2-mini's config.json without weights (`--random-weights`), with the byte
    tokenizer standing in for the real one (text ids mean nothing to random weights)."""

    def write(staging: Path) -> None:
        folder = staging / "Step-Audio-2-mini"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(configs.STEP_AUDIO_2_MINI, indent=2))
        write_tokenizer(folder)

    return materialise(f"step-audio2-mini-config-{TINY_VERSION}", write, root) / "Step-Audio-2-mini"
