"""Zonos voices from a folder (`--voices-dir`): a reference clip `<name>.wav` (or .flac, .mp3,
.ogg; any rate; no transcript needed), whose speaker embedding Zonos' speaker model makes
(speaker.py), or `<name>.npy`, an embedding made elsewhere (the official package's
`Zonos.make_speaker_embedding(wav, sr)`, saved with numpy.save)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from models.checkpoint_errors import CheckpointError
from models.csm.voices import AUDIO_SUFFIXES, load_audio

VOICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MIN_CLIP_S = 0.5


def read_voices(
    folder: str | Path, width: int, embed: Callable[[np.ndarray], list[float]], rate: int
) -> dict[str, list[float]]:
    """name → speaker embedding (`width` values) for every clip and `.npy` in `folder`;
    `embed` turns a clip (float32 mono at `rate`) into one."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"voices folder {folder} does not exist")
    voices = {}
    for path in sorted(folder.iterdir()):
        suffix = path.suffix.lower()
        if suffix not in AUDIO_SUFFIXES + (".npy",):
            continue
        if not VOICE_NAME.match(path.stem):
            raise CheckpointError(
                f"voice file {path.name}: a name starts with a letter and uses letters, "
                "digits, '_', '.' or '-' (at most 64)"
            )
        if path.stem in voices:
            raise CheckpointError(f"two voice files are named {path.stem!r} in {folder}")
        if suffix == ".npy":
            try:
                values = np.load(path, allow_pickle=False).astype(np.float32).reshape(-1)
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"could not read {path}: {exc}") from None
        else:
            audio = load_audio(path, rate)
            if len(audio) < MIN_CLIP_S * rate:
                raise CheckpointError(f"voice clip {path.name} is under {MIN_CLIP_S} s")
            values = np.asarray(embed(audio), dtype=np.float32)
        if values.shape != (width,) or not np.isfinite(values).all():
            raise CheckpointError(
                f"{path} holds {values.size} values; a Zonos speaker embedding is {width} "
                "finite numbers"
            )
        voices[path.stem] = values.tolist()
    if not voices:
        raise CheckpointError(
            f"voices folder {folder} holds no clips ({', '.join(AUDIO_SUFFIXES)}) or "
            "<name>.npy speaker embeddings"
        )
    return voices
