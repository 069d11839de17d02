"""Voices that clients make from a reference clip, as a model sees them.

A cloning-capable model (ModelFacts.voice_cloning) declares the clips it can use in
`ModelFacts.clip_rules` and implements `SpeechModel.add_clip_voice` / `remove_clip_voice`
(models/base.py). The gateway checks a clip against the rules before it reaches the model, so
a model only encodes clips it can use; `VoiceClip` is what crosses to the engine.

Clip voices are not listed in `ModelFacts.voices`: they belong to the client that made them,
and the gateway lists them to that client alone.

Encoding runs beside the engine loop (it is slow model work). A model whose voices live in
state its steps read (Chatterbox's conditioning table) returns the encoded voice as a
`PendingVoice`, and the engine puts it in place on the loop's own thread, between steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# A clip voice's name: the gateway makes it (`clip-<hex>`); any name a model's preset or
# --voices-dir voice may use is valid here too.
VOICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class ClipRules:
    """The reference clips a model can make a voice from."""

    min_s: float = 2.0  # shorter clips give the model too little of the voice
    max_s: float = 15.0  # longer ones fill the context (and take long to encode)
    # The model continues the clip's speech from its transcript (CSM, CosyVoice 2); a model
    # that takes the voice alone (a speaker embedding: Zonos; Qwen3-TTS Base, whose
    # transcript is optional) sets False, and gets the transcript when the client sends one.
    needs_transcript: bool = True


@dataclass(frozen=True)
class VoiceClip:
    """A checked reference clip: float32 mono samples at `sample_rate`, and its transcript
    (empty where the model needs none)."""

    audio: np.ndarray = field(compare=False)
    sample_rate: int
    transcript: str = ""

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(frozen=True)
class PendingVoice:
    """A client's voice encoded beside the engine loop, not yet usable: `install()` puts it in
    place and returns the bytes it holds. The engine calls it on the loop's own thread,
    between steps (engine/loop.py, InstallClipVoice), so nothing a step reads changes under
    it. It raises ModelInputError when the voice cannot be kept (the model's table is full)."""

    name: str
    install: Callable[[], int] = field(compare=False)


def resample(audio: np.ndarray, source_rate: int, rate: int) -> np.ndarray:
    """float32 mono at `source_rate` → float32 mono at `rate`, with libswresample (PyAV), as
    --voices-dir clips are read (models/csm/voices.py)."""
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if source_rate == rate or len(audio) == 0:
        return audio
    import av

    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    frame = av.AudioFrame.from_ndarray(audio[None, :], format="flt", layout="mono")
    frame.sample_rate = source_rate
    chunks = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
