"""voxgate-tiny's published layout, read and written.

    config.json                      VoxgateTinyConfig (+ codec_config; `text_input` chars/phones)
    tokenizer.json                   the character (text.py) or phone (phone_text.py) vocabulary
                                     and the normaliser's name
    model.safetensors                or model-0000i-of-0000N.safetensors + model.safetensors.index.json
    MODEL_CARD.md                    (shipped weights only)

Tensor names: the backbone's decoder layers use HF Llama names (`model.layers.{i}.self_attn.q_proj`
… unfused, so the backbone reads like any Llama), then `model.embed_text`, `model.embed_audio`,
`model.embed_position` (with pointer_positions), `model.norm`, `lm_head` (codebook 0 + end of audio), `depth.*` (the depth stage's own module
names) and `codec.*` (VoxCodec's module names). Shards stay under 15 MiB each so that each one
travels as a single file from the training machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.voxcodec import VoxCodec
from models.layers.llama import hf_layer_targets
from models.random_weights import randomise
from models.voxgate_tiny.config import VoxgateTinyConfig
from models.voxgate_tiny.lm import VoxgateTinyLM
from models.voxgate_tiny.phone_text import PhoneTokenizer
from models.voxgate_tiny.text import CharTokenizer, load_tokenizer

SHARD_BYTES = 15 * 2**20


def build_lm(config: VoxgateTinyConfig) -> VoxgateTinyLM:
    return VoxgateTinyLM(
        config.llama,
        config.num_codebooks,
        config.codebook_size,
        config.text_vocab_size,
        config.depth_inner,
        reading=config.reading,
        pointer_positions=config.pointer_positions,
    )


def lm_targets(lm: VoxgateTinyLM) -> dict[str, torch.Tensor]:
    """Published tensor name → the (view of the) parameter it fills."""
    targets = hf_layer_targets(lm.layers, lm.args, "model.layers.")
    targets.update(
        {
            "model.embed_text.weight": lm.embed_text.weight,
            "model.embed_audio.weight": lm.embed_audio.weight,
            "model.norm.weight": lm.norm.weight,
            "lm_head.weight": lm.head.weight,
        }
    )
    if lm.embed_position is not None:
        targets["model.embed_position.weight"] = lm.embed_position.weight
    targets.update({f"depth.{name}": p for name, p in lm.depth.named_parameters()})
    return targets


def published_state(
    lm: VoxgateTinyLM, codec: VoxCodec, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    state = {name: t.detach().to("cpu", dtype).contiguous() for name, t in lm_targets(lm).items()}
    state.update(
        {
            f"codec.{n}": t.detach().to("cpu", dtype).contiguous()
            for n, t in codec.state_dict().items()
        }
    )
    return state


def save_checkpoint(
    folder: Path,
    config: dict,
    lm: VoxgateTinyLM,
    codec: VoxCodec,
    tokenizer: CharTokenizer | PhoneTokenizer,
    dtype: torch.dtype = torch.bfloat16,
) -> list[Path]:
    """Write the published layout; returns the files written."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps({**config, "torch_dtype": str(dtype).removeprefix("torch.")}, indent=2) + "\n"
    )
    tokenizer.save(folder)
    state = published_state(lm, codec, dtype)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(state):
        nbytes = state[name].numel() * state[name].element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = state[name]
        size += nbytes
    written = [folder / "config.json", folder / "tokenizer.json"]
    if len(shards) == 1:
        save_file(shards[0], str(folder / "model.safetensors"), metadata={"format": "pt"})
        return [*written, folder / "model.safetensors"]
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
        written.append(folder / fname)
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    return [*written, folder / "model.safetensors.index.json"]


def load_checkpoint(
    folder: Path, device: torch.device, dtype: torch.dtype
) -> tuple[VoxgateTinyConfig, VoxgateTinyLM, VoxCodec, CharTokenizer | PhoneTokenizer]:
    """Read the published layout; CheckpointError names any missing, unexpected or mis-shaped
    tensor. The LM runs in `dtype`; the codec in float32 on the CPU (bfloat16 convolutions are
    slow there), in `dtype` elsewhere."""
    from models.codecs.voxcodec_stream import build_codec
    from models.loader import copy_into, iter_safetensors, read_config

    config = VoxgateTinyConfig.from_dict(read_config(folder), f"{folder}/config.json")
    tokenizer = load_tokenizer(folder)
    if tokenizer.vocab_size != config.text_vocab_size:
        raise CheckpointError(
            f"{folder}: tokenizer.json has {tokenizer.vocab_size} symbols, config.json says "
            f"text_vocab_size {config.text_vocab_size}"
        )
    lm = build_lm(config)
    targets = lm_targets(lm)
    lm_weights, codec_weights = [], []
    for name, tensor in iter_safetensors(folder):
        if name.startswith("codec."):
            codec_weights.append((name.removeprefix("codec."), tensor))
        else:
            lm_weights.append((name, tensor.float()))
    seen = copy_into(targets, lm_weights, str(folder))
    missing = sorted(set(targets) - seen)
    if missing:
        shown = ", ".join(missing[:5]) + (f" … ({len(missing)} in all)" if len(missing) > 5 else "")
        raise CheckpointError(f"{folder} is missing tensors: {shown}")
    codec = build_codec(config.codec.to_dict(), codec_weights, str(folder))
    codec_dtype = torch.float32 if device.type == "cpu" else dtype
    return config, lm.to(device, dtype).eval(), codec.to(device, codec_dtype).eval(), tokenizer


def write_random_checkpoint(
    folder: Path,
    config: dict,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    tokenizer: CharTokenizer | PhoneTokenizer | None = None,
) -> list[Path]:
    """A seeded random-weight model of `config` in the published layout: tests and speed
    measurements of the real code path before (or without) trained weights."""
    from models.codecs.voxcodec import VoxCodecConfig

    torch.manual_seed(seed)
    parsed = VoxgateTinyConfig.from_dict(config)
    lm, codec = build_lm(parsed), VoxCodec(VoxCodecConfig.from_dict(config["codec_config"]))
    randomise(lm)
    return save_checkpoint(folder, config, lm, codec, tokenizer or CharTokenizer(), dtype)
