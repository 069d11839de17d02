"""The published `ResembleAI/chatterbox` file names (ChatterboxTTS.from_local). Light: no
torch, so the family table (models/chatterbox/family.py) can recognise a folder."""

from __future__ import annotations

from pathlib import Path

T3_FILE = "t3_cfg.safetensors"
S3GEN_FILE = "s3gen.safetensors"
VE_FILE = "ve.safetensors"
CONDS_FILE = "conds.pt"
TOKENIZER_FILE = "tokenizer.json"
CHECKPOINT_FILES = (T3_FILE, S3GEN_FILE, VE_FILE, CONDS_FILE, TOKENIZER_FILE)


def is_chatterbox_folder(folder: Path) -> bool:
    """Whether `folder` holds Chatterbox's T3 and S3Gen files (the published layout)."""
    return folder.is_dir() and (folder / T3_FILE).exists() and (folder / S3GEN_FILE).exists()
