"""`tiny-chatterbox` (seeded random weights at scaled-down sizes) and the real configuration
with random weights (`chatterbox --random-weights`), written in the published layout on first
use and loaded through the real loader."""

from __future__ import annotations

from pathlib import Path

from models.chatterbox.checkpoint import REAL_CLIP, TINY_CLIP, write_chatterbox_checkpoint
from models.chatterbox.config import REAL_T3, TINY_T3
from models.chatterbox.s3gen import REAL_S3GEN, TINY_S3GEN
from models.preset_cache import materialise

PRESET_VERSION = "v3"  # bump when what the writer produces changes


def ensure_tiny_chatterbox(root: Path | None = None) -> Path:
    def write(folder: Path) -> None:
        write_chatterbox_checkpoint(
            folder / "model", TINY_T3, TINY_S3GEN, seed=0, clip_sizes=TINY_CLIP
        )

    return materialise(f"tiny-chatterbox-{PRESET_VERSION}", write, root) / "model"


def ensure_random_chatterbox(root: Path | None = None) -> Path:
    """The real shapes (T3 0.5B, S3Gen) with seeded random weights: about 3 GB in fp32 (the clip encoders included)."""

    def write(folder: Path) -> None:
        write_chatterbox_checkpoint(
            folder / "model", REAL_T3, REAL_S3GEN, seed=0, clip_sizes=REAL_CLIP
        )

    return materialise(f"chatterbox-random-{PRESET_VERSION}", write, root) / "model"
