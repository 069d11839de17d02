"""What a load asks of a model family besides the model itself (--codec, --voices-dir,
--random-weights), checked against the family's declaration (models/family_spec.py,
ModelFamily) before the family loads anything, with one message for every family. Light: no
torch."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from models.checkpoint_errors import CheckpointError
from models.families import cloning_families, codec_families, random_layouts
from models.family_spec import ModelFamily


def check_random_weights(model: str, presets: Collection[str]) -> None:
    """--random-weights on a model that is not a preset (`presets`: every preset) is refused
    before the model is looked for, so that nothing is downloaded."""
    if model not in presets:
        raise CheckpointError(
            f"--random-weights works with presets only ({', '.join(random_layouts())})"
        )


def check_load(
    family: ModelFamily,
    model: str,
    codec: str | None,
    voices_dir: str | None,
    random_weights: bool = False,
) -> None:
    """CheckpointError, saying what to drop, for a codec, voices or random weights the family
    cannot take for `model`."""
    if random_weights and model not in family.random_layouts:
        layouts = ", ".join(n for n in family.presets if n in family.random_layouts) or "none"
        if model in family.seeded_presets:
            raise CheckpointError(
                f"{model} is random already: its seeded random weights already stand in for "
                f"a checkpoint; drop --random-weights (--random-weights works with {layouts})"
            )
        raise CheckpointError(
            f"{model} takes no --random-weights (--random-weights works with {layouts})"
        )
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
    if voices_dir and not Path(voices_dir).expanduser().is_dir():  # before loading weights
        raise CheckpointError(
            f"--voices-dir {voices_dir}: no such folder; give a folder of NAME.wav clips, "
            "each with its transcript in NAME.txt"
        )
