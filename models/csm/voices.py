"""Reference voices for voice prompting, read from a folder: `<name>.wav` (or .flac, .mp3, .ogg;
any rate, any channels) beside `<name>.txt`, the transcript of that clip. A transcript that
starts with `[N]` gives the clip's speaker id N (CSM's own turn notation); otherwise it is 0."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.checkpoint_errors import CheckpointError

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg")
_SPEAKER = re.compile(r"^\s*\[(\d+)\]\s*")


@dataclass(frozen=True)
class VoiceClip:
    name: str
    text: str
    speaker: int
    audio: np.ndarray  # float32 mono at the rate read_voices was asked for


def read_voices(folder: str | Path, sample_rate: int) -> list[VoiceClip]:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"voices folder {folder} does not exist")
    clips = []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES):
        transcript = path.with_suffix(".txt")
        if not transcript.is_file():
            raise CheckpointError(
                f"voice clip {path.name} has no transcript: write what it says to {transcript.name}"
            )
        text = transcript.read_text().strip()
        match = _SPEAKER.match(text)
        speaker = int(match.group(1)) if match else 0
        text = text[match.end() :] if match else text
        clips.append(VoiceClip(path.stem, text, speaker, load_audio(path, sample_rate)))
    if not clips:
        raise CheckpointError(
            f"voices folder {folder} holds no audio clips "
            f"({', '.join(AUDIO_SUFFIXES)}) with transcripts"
        )
    return clips


def load_audio(path: Path, sample_rate: int) -> np.ndarray:
    """Decode and resample to float32 mono with libswresample (PyAV), as the gateway does."""
    import av

    try:
        with av.open(str(path)) as container:
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            chunks = [
                f.to_ndarray().reshape(-1)
                for frame in container.decode(audio=0)
                for f in resampler.resample(frame)
            ]
            chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    except (av.FFmpegError, IndexError) as exc:
        raise CheckpointError(f"could not read audio from {path}: {exc}") from exc
    if not chunks:
        raise CheckpointError(f"{path} holds no audio")
    return np.concatenate(chunks).astype(np.float32)
