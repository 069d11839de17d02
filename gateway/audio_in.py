"""Input audio: wire frames in (Opus packets, pcm16, μ-law or A-law chunks), model PCM out.

The mirror of `gateway/audio.py`: libopus / libavcodec decode and libswresample resample, both
through PyAV. A decoder belongs to one session and keeps the codec and resampler state across
its frames, so a stream decoded packet by packet is one continuous signal.
"""

from __future__ import annotations

import fractions
import weakref

import av
import numpy as np

from gateway.opus_lib import NATIVE_RATES, OpusError, OpusLib, load_opus
from gateway.protocol import AudioFormat, AudioSpec

_LONGEST_PACKET_MS = 120  # an Opus packet holds at most 120 ms (RFC 6716, 3.2.1)

# G.711's two companding laws, each decoded by libavcodec's codec of that law.
_G711_CODECS = {AudioFormat.MULAW: "pcm_mulaw", AudioFormat.ALAW: "pcm_alaw"}


class UndecodableAudio(ValueError):
    """A frame the session's input format cannot decode; the message says why."""


class DirectOpusDecoder:
    """Opus packets straight to the model's rate through libopus itself (gateway.opus_lib):
    one foreign call a packet, no resampler, for a model rate Opus decodes to (NATIVE_RATES).
    The same signal as AudioDecoder's route (decode at 48 kHz, resample) up to each route's
    filter, without the resampler's hold-back."""

    def __init__(self, target_rate: int, lib: OpusLib) -> None:
        self._lib = lib
        self._decoder = lib.create_decoder(target_rate)
        weakref.finalize(self, lib.destroy_decoder, self._decoder)
        self._out = np.zeros(target_rate * _LONGEST_PACKET_MS // 1000, np.float32)

    def decode(self, data: bytes) -> np.ndarray:
        try:
            n = self._lib.decode(self._decoder, data, self._out)
        except OpusError as exc:
            raise UndecodableAudio(f"undecodable opus frame: {exc}") from None
        return self._out[:n].copy()


class AudioDecoder:
    def __init__(self, spec: AudioSpec, target_rate: int) -> None:
        self.spec = spec
        self.target_rate = target_rate
        self._codec = None
        # Opus to a rate libopus decodes to: libopus itself (None: PyAV's decoder, resampled).
        lib = (
            load_opus() if spec.format is AudioFormat.OPUS and target_rate in NATIVE_RATES else None
        )
        self._direct = DirectOpusDecoder(target_rate, lib) if lib is not None else None
        if spec.format is AudioFormat.OPUS and self._direct is None:
            self._codec = av.CodecContext.create("libopus", "r")
        elif spec.format in _G711_CODECS:
            self._codec = av.CodecContext.create(_G711_CODECS[spec.format], "r")
        if self._codec is not None:
            self._codec.sample_rate = spec.sample_rate
            self._codec.layout = "mono"
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=target_rate)
        self._pts = 0

    @property
    def direct_opus(self) -> bool:
        """Whether Opus goes straight to the target rate through libopus (one call a packet,
        no resampler state): what a decoder in another process can do in its place."""
        return self._direct is not None

    def decode(self, data: bytes) -> np.ndarray:
        """One wire frame → float32 mono samples at `target_rate` (possibly empty: the
        resampler holds a few samples back until the next frame)."""
        if not data:
            return np.zeros(0, np.float32)
        if self._direct is not None:
            return self._direct.decode(data)
        if self._codec is None:  # pcm16
            if len(data) % 2:
                raise UndecodableAudio(
                    "pcm16 frames hold whole 16-bit samples (an even byte count)"
                )
            samples = np.frombuffer(data, dtype="<i2").astype(np.int16)[None, :]
            frames = [av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")]
            frames[0].sample_rate = self.spec.sample_rate
        else:
            try:
                frames = self._codec.decode(av.Packet(data))
            except (av.error.FFmpegError, ValueError) as exc:
                raise UndecodableAudio(
                    f"undecodable {self.spec.format.value} frame: {exc}"
                ) from None
        out = []
        for frame in frames:
            frame.pts = self._pts
            frame.time_base = fractions.Fraction(1, frame.sample_rate)
            self._pts += frame.samples
            out.extend(r.to_ndarray()[0] for r in self._resampler.resample(frame))
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)
