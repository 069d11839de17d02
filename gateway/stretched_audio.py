"""A reply's audio at the session's `speed`: the model's PCM time-stretched (gateway/time_stretch.py)
before it reaches the reply's encoder (resampler, codec), and the two clocks that then exist.

The model's audio runs in *model time*; the listener hears *played time*, model time / speed.
Everything on the wire (frames, `audio_ms`, `playback` reports, word timings, `heard_words`,
Realtime's `audio_end_ms`, Twilio's marks) is played time, as the listener heard it; the engine
(playback reports, the audio held back) and the conversation history (what was heard of a
reply) take model time. `PlayedTime` converts; at speed 1 both are the same and no stretcher
runs at all.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from gateway.audio import ChunkEncoder, sanitized
from gateway.protocol import AudioSpec
from gateway.time_stretch import TimeStretcher


@dataclass(frozen=True)
class PlayedTime:
    """A reply's speed, and what follows from it for the engine."""

    speed: float = 1.0

    def model_s(self, played_s: float) -> float:
        """The model's audio that `played_s` seconds of the listener's audio say."""
        return played_s * self.speed

    def played_s(self, model_s: float) -> float:
        """When the listener hears what the model says `model_s` into its audio."""
        return model_s / self.speed

    def delivery_hold_s(self, output: AudioSpec, sample_rate: int) -> float:
        """SpeechRequest.delivery_hold_s in model time: the encoder's last, partial frame, and
        at another speed than 1 the input the stretcher keeps back for the next chunk."""
        hold = self.model_s(output.frame_ms / 1000)
        if self.speed != 1.0:
            hold += TimeStretcher(self.speed, sample_rate).max_hold_s
        return hold


class StretchingEncoder(ChunkEncoder):
    """`inner` fed with the audio time-stretched to `speed`. The stretch (~1-10 ms of numpy per
    second of audio) runs on a worker thread like the encoders, one call at a time."""

    def __init__(self, inner: ChunkEncoder, speed: float) -> None:
        self.inner = inner
        self.source_rate = inner.source_rate
        self.spec = inner.spec
        self._stretcher = TimeStretcher(speed, inner.source_rate)
        self._lock = threading.Lock()  # a barge-in may cancel an await whose thread still runs

    async def _stretch(self, pcm: np.ndarray | None) -> np.ndarray:
        def run() -> np.ndarray:
            with self._lock:
                if pcm is None:
                    return self._stretcher.flush()
                return self._stretcher.push(sanitized(pcm))

        return await asyncio.to_thread(run)

    async def encode(self, pcm: np.ndarray) -> list[bytes]:
        if len(pcm) == 0:
            return []
        return await self.inner.encode(await self._stretch(pcm))

    async def encode_parts(self, pcm: np.ndarray) -> AsyncIterator[list[bytes]]:
        if len(pcm) == 0:
            return
        async for frames in self.inner.encode_parts(await self._stretch(pcm)):
            yield frames

    async def flush(self) -> list[bytes]:
        tail = await self._stretch(None)
        frames = await self.inner.encode(tail) if len(tail) else []
        return frames + await self.inner.flush()

    def close(self) -> None:
        self.inner.close()


def at_speed(encoder: ChunkEncoder, speed: float) -> ChunkEncoder:
    """The encoder a reply plays through: `encoder` itself at speed 1 (no cost)."""
    return encoder if speed == 1.0 else StretchingEncoder(encoder, speed)
