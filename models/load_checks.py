"""What a load asks of a model family besides the model itself (--codec, --voices-dir), checked
against the family's declaration (models/family_spec.py, ModelFamily) before the family loads
anything, with one message for every family. Light: no torch."""

from __future__ import annotations

from models.checkpoint_errors import CheckpointError
from models.families import cloning_families, codec_families
from models.family_spec import ModelFamily


def check_load(family: ModelFamily, codec: str | None, voices_dir: str | None) -> None:
    """CheckpointError, saying what to drop, for a codec or voices the family cannot take."""
    if codec and not family.takes_codec:
        raise CheckpointError(
            f"{family.name} checkpoints carry {family.own_codec}; drop --codec "
            f"(it is for {codec_families()} models)"
        )
    if voices_dir and not family.takes_voices:
        raise CheckpointError(
            f"{family.name} models make no voices from clips; drop --voices-dir "
            f"(it is for {cloning_families()} models)"
        )
