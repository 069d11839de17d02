"""Voice clip files as clients send them (WAV, Ogg/WebM Opus, and formats the server refuses),
made in memory, and the voices server's description, for the tests of voices from clients."""

from __future__ import annotations

import base64
import io
import wave
from dataclasses import dataclass

import numpy as np

# The API keys of the voices server (conftest.py `csm_voices`): the browser test has its own.
VOICES_KEYS = ("voices-key-aaaa", "voices-key-bbbb", "voices-key-cccc")


@dataclass(frozen=True)
class VoicesServer:
    MAX_CLIP_BYTES = 600 * 1024  # above a 16 s WAV at 16 kHz: too long is not too big

    server: object  # gateway_testkit.Server
    engine: object  # gateway.supervisor.SupervisedEngine over a tiny-csm engine process


def noise(seconds: float, rate: int, level: float = 0.2, seed: int = 1) -> np.ndarray:
    """A stand-in for speech: loud enough to pass the silence check."""
    rng = np.random.default_rng(seed)
    return (level * rng.standard_normal(int(seconds * rate))).clip(-1, 1).astype(np.float32)


def wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((audio * 32767).astype("<i2").tobytes())
    return out.getvalue()


def encoded_bytes(audio: np.ndarray, rate: int, container: str, codec: str) -> bytes:
    """`audio` in a container PyAV writes: ("webm", "libopus") as Chrome's MediaRecorder,
    ("ogg", "libopus") as Firefox's, ("au", "pcm_s16be") as a format the server refuses."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(audio[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# The clip the voices tests send (also the voices server's --voices-dir voice `narrator`).
VOICE_CLIP = wav_bytes(noise(2.5, 16000), 16000)
VOICE_TRANSCRIPT = "This is how I sound."
