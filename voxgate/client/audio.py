"""Audio between numpy and the wire, for the client: the gateway's own codecs (PyAV: libopus,
libavcodec's μ-law, libswresample), so a client encodes and decodes exactly as the server does.

`OutputDecoder` turns the server's frames into float32 PCM (Opus at 48 kHz, pcm16 and μ-law at
their rates); `InputEncoder` turns microphone samples at any rate into the session's input
frames, whole frames only (the rest waits for more samples, or `flush`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gateway.audio import make_encoder
from gateway.audio_in import AudioDecoder
from gateway.protocol import AudioFormat, AudioSpec


def audio_spec(raw: Mapping[str, Any]) -> AudioSpec:
    """An `input_audio` / `output_audio` object as `session.started` states it."""
    fmt = AudioFormat(raw.get("format", AudioFormat.OPUS.value))
    defaults = AudioSpec()
    return AudioSpec(
        fmt,
        int(raw.get("sample_rate", defaults.sample_rate)),
        int(raw.get("frame_ms", defaults.frame_ms)),
    )


class OutputDecoder:
    """The session's output frames → float32 mono PCM at `sample_rate`."""

    def __init__(self, output_audio: Mapping[str, Any]) -> None:
        self.spec = audio_spec(output_audio)
        self.sample_rate = self.spec.sample_rate
        self._decoder = AudioDecoder(self.spec, self.sample_rate)

    def decode(self, frame: bytes) -> np.ndarray:
        return self._decoder.decode(frame)

    def reset(self) -> None:
        """A new response: its audio is a new stream (the server opens a new encoder)."""
        self._decoder = AudioDecoder(self.spec, self.sample_rate)


class InputEncoder:
    """Microphone samples at `source_rate` → the session's `input_audio` frames."""

    def __init__(self, input_audio: Mapping[str, Any], source_rate: int) -> None:
        self.spec = audio_spec(input_audio)
        self.source_rate = source_rate
        self._encoder = make_encoder(self.spec, source_rate)

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        """float32 mono samples in [-1, 1] → the whole frames now complete."""
        return self._encoder.encode(np.asarray(pcm, dtype=np.float32).reshape(-1))

    def flush(self) -> list[bytes]:
        """The samples held back, padded with silence to a whole frame."""
        return self._encoder.flush()
