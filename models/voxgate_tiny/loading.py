"""Load voxgate-tiny from its published layout (the weights shipped in the repo, or any folder)."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.voxcodec_stream import VoxCodecDetokenizer
from models.loader import read_config, resolve_source
from models.voxgate_tiny.checkpoint import load_checkpoint
from models.voxgate_tiny.config import MODEL_TYPE
from models.voxgate_tiny.model import VoxgateTinyModel

# The trained weights, shipped with the package (training/README.md says how they were made).
SHIPPED_WEIGHTS = Path(__file__).parent / "weights"


def is_voxgate_tiny_config(cfg: dict) -> bool:
    return cfg.get("model_type") == MODEL_TYPE


def shipped_weights() -> Path:
    if not (SHIPPED_WEIGHTS / "config.json").exists():
        raise CheckpointError(
            f"the voxgate-tiny weights are not in {SHIPPED_WEIGHTS}: this checkout predates them. "
            "Train them (training/README.md) and copy the checkpoint folder there, or pass "
            "--model with another checkpoint"
        )
    return SHIPPED_WEIGHTS


def load_voxgate_tiny(
    source: str | Path, device: torch.device, dtype: torch.dtype, name: str | None = None
) -> VoxgateTinyModel:
    folder = resolve_source(str(source), required=("config.json", "tokenizer.json"))
    if not is_voxgate_tiny_config(read_config(folder)):
        raise CheckpointError(
            f"{folder}/config.json is not a voxgate-tiny checkpoint (model_type {MODEL_TYPE!r})"
        )
    config, lm, codec, tokenizer = load_checkpoint(folder, device, dtype)
    return VoxgateTinyModel(
        lm,
        tokenizer,
        VoxCodecDetokenizer(codec),
        config.sampling,
        name=name or folder.name,
        frames_per_row=config.frames_per_row,
    )
