"""Zonos voices from a folder (`--voices-dir`): `<name>.npy`, the 128-value speaker embedding
Zonos' own speaker model makes from a reference clip (the official package's
`Zonos.make_speaker_embedding(wav, sr)`, saved with numpy.save). The speaker model itself (a
ResNet293 with LDA, Zyphra/Zonos-v0.1-speaker-embedding) is not part of Voxgate yet, so clips
are refused with that recipe."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from models.checkpoint_errors import CheckpointError

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg")
VOICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
RECIPE = (
    "make its speaker embedding with the official Zonos package "
    "(numpy.save('<name>.npy', model.make_speaker_embedding(wav, sr).float().cpu().numpy()))"
)


def read_speaker_embeddings(folder: str | Path, width: int) -> dict[str, list[float]]:
    """name → embedding (`width` values) for every `<name>.npy` in `folder`."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"voices folder {folder} does not exist")
    clips = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    if clips:
        raise CheckpointError(
            f"{folder} holds audio clips ({', '.join(clips[:3])}); Zonos cannot read clips "
            f"yet: {RECIPE}"
        )
    voices = {}
    for path in sorted(folder.glob("*.npy")):
        if not VOICE_NAME.match(path.stem):
            raise CheckpointError(
                f"voice file {path.name}: a name starts with a letter and uses letters, "
                "digits, '_', '.' or '-' (at most 64)"
            )
        try:
            values = np.load(path, allow_pickle=False).astype(np.float32).reshape(-1)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"could not read {path}: {exc}") from None
        if values.shape != (width,) or not np.isfinite(values).all():
            raise CheckpointError(
                f"{path} holds {values.size} values; a Zonos speaker embedding is {width} "
                "finite numbers"
            )
        voices[path.stem] = values.tolist()
    if not voices:
        raise CheckpointError(f"voices folder {folder} holds no <name>.npy speaker embeddings")
    return voices
