"""The user's side of a spoken conversation: real speech clips, and the microphone frames a
client sends for them.

The default clips are `bench/turn_speech/*.flac`: short English questions spoken by flite's
`slt` voice, trimmed of flite's leading and trailing silence (so a clip ends where its speech
ends), 16 kHz mono. They are committed so that a GPU machine without flite has them; they are
made again with `python -m voxbench.turn_speech` (needs flite on PATH). `--turn-audio FILE …`
takes any other recordings (WAV, FLAC, Ogg … anything PyAV reads), trimmed the same way.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.csm.voices import load_audio

SPEECH_RATE = 16000
DEFAULT_SPEECH_DIR = Path(__file__).resolve().parents[1] / "bench" / "turn_speech"
# Single phrases with no pause inside: a turn detector must hear each as one turn.
PHRASES = {
    "weather": "What is the weather like today?",
    "ocean": "Tell me something interesting about the ocean.",
    "moon": "How far away is the moon from here?",
    "book": "Can you recommend a good book to read?",
}
LOUD = 0.02  # |sample| above this is speech; the clip is cut to the first and last of them
ROOM_NOISE = 1e-3  # the microphone between turns: a quiet room, not digital zero


@dataclass(frozen=True)
class SpeechClip:
    name: str
    pcm: np.ndarray  # float32 mono at SPEECH_RATE, speech from its first to its last sample

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SPEECH_RATE


@dataclass(frozen=True)
class MicTurn:
    """One clip as the session's input frames, each `frame_ms` of audio."""

    name: str
    speech_s: float
    packets: tuple[bytes, ...]


def trimmed(pcm: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm) > LOUD)
    if not len(loud):
        raise ValueError("the clip holds no speech (nothing louder than -34 dBFS)")
    return pcm[loud[0] : loud[-1] + 1]


def load_clips(paths: Sequence[Path] = ()) -> list[SpeechClip]:
    """The clips of `paths` (files, or folders of them), else the default folder's."""
    files: list[Path] = []
    for path in paths or [DEFAULT_SPEECH_DIR]:
        path = Path(path)
        if path.is_dir():
            files += sorted(f for f in path.iterdir() if f.suffix in (".flac", ".wav", ".ogg"))
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"--turn-audio {path}: no such file or folder")
    if not files:
        raise ValueError(f"no speech clips in {', '.join(map(str, paths or [DEFAULT_SPEECH_DIR]))}")
    clips = []
    for f in files:
        try:
            clips.append(SpeechClip(f.stem, trimmed(load_audio(f, SPEECH_RATE))))
        except ValueError as exc:  # CheckpointError is a ValueError too
            raise ValueError(f"--turn-audio {f}: {exc}") from None
    return clips


def mic_turns(clips: Sequence[SpeechClip], input_audio: Mapping[str, Any]) -> list[MicTurn]:
    """Each clip encoded once as the session's input frames (the last one padded)."""
    from voxgate.client.audio import InputEncoder

    turns = []
    for clip in clips:
        encoder = InputEncoder(input_audio, SPEECH_RATE)
        packets = encoder.encode(clip.pcm) + encoder.flush()
        turns.append(MicTurn(clip.name, clip.seconds, tuple(packets)))
    return turns


def room_packets(input_audio: Mapping[str, Any], seconds: float = 2.0, seed: int = 0):
    """A quiet room as input frames, cycled by the microphone between turns."""
    from voxgate.client.audio import InputEncoder

    noise = np.random.default_rng(seed).standard_normal(int(seconds * SPEECH_RATE))
    encoder = InputEncoder(input_audio, SPEECH_RATE)
    return tuple(encoder.encode((noise * ROOM_NOISE).astype(np.float32)) + encoder.flush())


def synthesize(folder: Path, voice: str = "slt") -> list[Path]:
    """The default clips, made again with flite (16 kHz FLAC, trimmed)."""
    import av

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in PHRASES.items():
            wav = Path(tmp) / f"{name}.wav"
            subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(wav)], check=True)
            pcm = trimmed(load_audio(wav, SPEECH_RATE))
            pcm16 = (np.clip(pcm, -1, 1) * 32767).astype(np.int16)
            path = folder / f"{name}.flac"
            with av.open(str(path), "w", format="flac") as container:
                stream = container.add_stream("flac", rate=SPEECH_RATE, layout="mono")
                frame = av.AudioFrame.from_ndarray(pcm16[None, :], format="s16", layout="mono")
                frame.sample_rate = SPEECH_RATE
                for packet in [*stream.encode(frame), *stream.encode(None)]:
                    container.mux(packet)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write the default turn clips with flite")
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_SPEECH_DIR)
    args = parser.parse_args(argv)
    for path in synthesize(args.folder):
        print(path, f"{load_clips([path])[0].seconds:.2f} s")


if __name__ == "__main__":
    main()
