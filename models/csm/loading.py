"""Build a CsmModel from a checkpoint folder in transformers' sesame/csm-1b layout: config.json
(`CsmConfig`, its `codec_config` the Mimi), model.safetensors (or sharded) with the backbone,
depth decoder and `codec_model.` tensors, tokenizer.json (Llama 3)."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.mimi import MimiDetokenizer, build_mimi, load_mimi_weights, require_transformers
from models.csm.backbone import CsmBackbone
from models.csm.depth import CsmDepthDecoder
from models.csm.model import CsmModel
from models.layers.llama import LlamaArgs
from models.loader import (
    load_with_codec,
    raise_missing,
    read_config,
    resolve_source,
)

CODEC_PREFIX = "codec_model."
_TIED = (
    "backbone_model.embed_tokens.embed_audio_tokens.weight",
    "depth_decoder.model.embed_tokens.weight",
)


def is_csm_config(cfg: dict) -> bool:
    return cfg.get("model_type") == "csm"


def load_csm(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = False,
    name: str | None = None,
    constrain_codes: bool = True,
    voices_dir: str | None = None,
) -> CsmModel:
    folder = resolve_source(source, required=("config.json", "tokenizer.json"))
    cfg = read_config(folder)
    if not is_csm_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not a CSM checkpoint (model_type must be 'csm', got "
            f"{cfg.get('model_type')!r}); sesame/csm-1b in the transformers layout is"
        )
    cfg = complete_config(cfg, str(folder))
    backbone, depth, tied = build_csm(cfg, device, dtype)
    mimi = build_mimi(_field(cfg, "codec_config"))
    _load_weights(folder, backbone, depth, mimi, tied, progress)
    tokenizer = load_tokenizer(folder)
    model = assemble(
        cfg, backbone, depth, mimi, tokenizer, device, name or folder.name, constrain_codes
    )
    if voices_dir is not None:
        add_voices_dir(model, voices_dir)
    return model


def add_voices_dir(model: CsmModel, voices_dir: str) -> None:
    """Every clip of `voices_dir` (CSM's reader: NAME.wav + NAME.txt) as a voice prompt."""
    from models.csm.voices import read_voices

    for clip in read_voices(voices_dir, model.detok.sample_rate):
        try:
            model.add_voice(clip.name, clip.text, clip.audio, clip.speaker)
        except ValueError as exc:  # ModelInputError too: name, transcript, length
            raise CheckpointError(f"voice clip {clip.name!r} in {voices_dir}: {exc}") from exc


def assemble(
    cfg: dict, backbone, depth, mimi, tokenizer, device, name: str, constrain_codes: bool = True
) -> CsmModel:
    """A CsmModel of built, weighted parts. The codec stays float32: a small share of the
    compute, and streamed audio keeps matching the whole decode to float32 rounding."""
    return CsmModel(
        backbone.eval(),
        depth.eval(),
        tokenizer,
        MimiDetokenizer(mimi.to(device)),
        eos_code=int(cfg.get("codebook_eos_token_id", 0)),
        name=name,
        constrain_codes=constrain_codes,
    )


def complete_config(cfg: dict, where: str) -> dict:
    """Every field, as transformers reads the file: configs saved with `use_diff` (as
    transformers 4.x wrote sesame/csm-1b) leave out whatever equals CsmConfig's defaults."""
    require_transformers()
    from transformers import CsmConfig

    try:
        return CsmConfig.from_dict(cfg).to_dict()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}/config.json is not a valid CsmConfig: {exc}") from exc


def _field(cfg: dict, key: str):
    if key not in cfg:
        raise CheckpointError(f"config.json lacks the CSM field {key!r}")
    return cfg[key]


def build_csm(cfg: dict, device: torch.device, dtype: torch.dtype):
    """The backbone and depth decoder of `cfg` on `device` (weights not loaded), and whether
    their audio embeddings are tied."""
    k, vocab = int(_field(cfg, "num_codebooks")), int(_field(cfg, "vocab_size"))
    depth_cfg = _field(cfg, "depth_decoder_config")
    tied = bool(cfg.get("tie_codebooks_embeddings", True))
    with torch.device(device):
        backbone = CsmBackbone(
            LlamaArgs.from_hf_config(cfg), k, vocab, int(_field(cfg, "text_vocab_size"))
        )
        depth = CsmDepthDecoder(
            LlamaArgs.from_hf_config(depth_cfg),
            k,
            vocab,
            backbone.args.hidden_size,
            embed_audio=backbone.embed_audio if tied else None,
        )
    return backbone.to(dtype), depth.to(dtype), tied


def _load_weights(folder: Path, backbone, depth, mimi, tied: bool, progress: bool) -> None:
    targets = {**backbone.hf_targets(), **depth.hf_targets()}
    seen, codec = load_with_codec(folder, targets, CODEC_PREFIX, progress)
    required = set(targets) - set(_TIED) if tied else set(targets)
    missing = sorted(required - seen)
    if tied and not seen & set(_TIED):
        missing.append(" or ".join(_TIED))
    raise_missing(missing, str(folder))
    if not codec:
        raise CheckpointError(
            f"checkpoint {folder} has no {CODEC_PREFIX}* tensors: the transformers layout of "
            "sesame/csm-1b includes its Mimi codec"
        )
    load_mimi_weights(mimi, codec, str(folder))


def load_tokenizer(folder: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))
