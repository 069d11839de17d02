"""Build a MoshiModel from transformers' layout (kmhf/hf-moshiko): config.json (`MoshiConfig`,
the Mimi codec in `audio_encoder_config`, the depth transformer in `depth_decoder_config`),
model.safetensors (or sharded) with `decoder.*`, `depth_decoder.*`, `embed_tokens.{0..15}` and
the codec under `audio_encoder.` (kyutai/mimi's flat names), tokenizer.json."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.mimi import MimiDetokenizer, build_mimi, load_mimi_weights, require_transformers
from models.codecs.mimi_encoder_streaming import MimiStreamEncoder
from models.loader import (
    load_with_codec,
    raise_missing,
    read_config,
    resolve_source,
)
from models.moshi.depth import MoshiDepth
from models.moshi.model import MoshiModel
from models.moshi.temporal import MoshiTemporal, llama_args

CODEC_PREFIX = "audio_encoder."


def is_moshi_config(cfg: dict) -> bool:
    return cfg.get("model_type") == "moshi"


def complete_config(cfg: dict, where: str) -> dict:
    """Every field as transformers reads the file (saved configs may leave defaults out)."""
    require_transformers()
    from transformers import MoshiConfig

    try:
        return MoshiConfig.from_dict(dict(cfg)).to_dict()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where} is not a valid MoshiConfig: {exc}") from exc


def build_moshi(cfg: dict, device: torch.device, dtype: torch.dtype):
    """Uninitialised temporal and depth transformers and the Mimi codec for a complete config."""
    k, text_vocab = int(cfg["num_codebooks"]), int(cfg["vocab_size"])
    audio_vocab = int(cfg["audio_vocab_size"])
    depth_cfg = {**cfg["depth_decoder_config"], "num_codebooks": k}
    with torch.device(device):
        temporal = MoshiTemporal(llama_args(cfg), text_vocab, audio_vocab, num_streams=2 * k)
        depth = MoshiDepth(depth_cfg, temporal.args.hidden_size, text_vocab, audio_vocab)
    mimi = build_mimi(cfg["audio_encoder_config"])
    return temporal.to(dtype), depth.to(dtype), mimi


def assemble(cfg: dict, temporal, depth, mimi, tokenizer, device, name: str) -> MoshiModel:
    """The codec stays float32: a small share of the compute, and streamed audio keeps matching
    the whole decode to float32 rounding."""
    mimi = mimi.to(device)
    k = int(cfg["num_codebooks"])
    return MoshiModel(
        temporal.eval(),
        depth.eval(),
        tokenizer,
        MimiDetokenizer(mimi, first_chunk_frames=1, chunk_frames=1, num_codebooks=k),
        MimiStreamEncoder(mimi, k),
        text_vocab=int(cfg["vocab_size"]),
        audio_vocab=int(cfg["audio_vocab_size"]),
        name=name,
    )


def load_moshi(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = False,
    name: str | None = None,
) -> MoshiModel:
    folder = resolve_source(source, required=("config.json", "tokenizer.json"))
    cfg = read_config(folder)
    if not is_moshi_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not a Moshi checkpoint (model_type must be 'moshi', got "
            f"{cfg.get('model_type')!r}); kmhf/hf-moshiko in the transformers layout is"
        )
    cfg = complete_config(cfg, f"{folder}/config.json")
    temporal, depth, mimi = build_moshi(cfg, device, dtype)
    _load_weights(folder, temporal, depth, mimi, progress)
    return assemble(
        cfg, temporal, depth, mimi, _load_tokenizer(folder), device, name or folder.name
    )


def _load_weights(folder: Path, temporal, depth, mimi, progress: bool) -> None:
    targets = {**temporal.hf_targets(), **depth.hf_targets()}
    seen, codec = load_with_codec(folder, targets, CODEC_PREFIX, progress)
    raise_missing(sorted(set(targets) - seen), str(folder))
    if not codec:
        raise CheckpointError(
            f"checkpoint {folder} has no {CODEC_PREFIX}* tensors: the transformers layout of "
            "kmhf/hf-moshiko includes its Mimi codec"
        )
    load_mimi_weights(mimi, codec, str(folder))


def _load_tokenizer(folder: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))
