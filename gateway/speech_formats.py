"""The audio files of `POST /v1/audio/speech` (gateway/speech_http.py): 16-bit PCM in, the bytes
of the response format out, a piece at a time, so the body can stream as the audio is made.

Every format is 24 kHz mono, as OpenAI's are: `pcm` is raw little-endian 16-bit samples, `wav`
those behind a RIFF header whose sizes say "unknown" (0xFFFFFFFF: the length is not known when
the header leaves; decoders read to the end), and the others are PyAV's codecs in their usual
streaming containers: `mp3` (libmp3lame), `opus` (libopus in Ogg), `aac` (ADTS) and `flac`.
A format whose encoder this PyAV build lacks is not offered (`available_formats`), and a
request for it is answered with a 400 that says so.
"""

from __future__ import annotations

import abc
import fractions
import struct
from dataclasses import dataclass

import av
import numpy as np

SPEECH_RATE = 24000  # Hz of every format, OpenAI's rate


@dataclass(frozen=True)
class SpeechFormat:
    name: str  # the request's `response_format`
    content_type: str
    codec: str | None = None  # PyAV encoder; None: written here (pcm, wav)
    container: str | None = None  # PyAV muxer


FORMATS: dict[str, SpeechFormat] = {
    f.name: f
    for f in (
        SpeechFormat("mp3", "audio/mpeg", "libmp3lame", "mp3"),
        SpeechFormat("opus", "audio/ogg", "libopus", "ogg"),
        SpeechFormat("aac", "audio/aac", "aac", "adts"),
        SpeechFormat("flac", "audio/flac", "flac", "flac"),
        SpeechFormat("wav", "audio/wav"),
        SpeechFormat("pcm", "audio/pcm"),
    )
}


def _has_encoder(codec: str | None) -> bool:
    if codec is None:
        return True
    try:
        av.codec.Codec(codec, "w")
    except (av.codec.codec.UnknownCodecError, ValueError):
        return False
    return True


def available_formats() -> dict[str, SpeechFormat]:
    """The formats this server can write (PyAV builds differ in the encoders they carry)."""
    return {name: f for name, f in FORMATS.items() if _has_encoder(f.codec)}


class SpeechFileWriter(abc.ABC):
    """One response's file: `write` 16-bit PCM pieces, then `close` once; each returns the
    bytes now ready to send (possibly none: codecs and muxers hold some back)."""

    @abc.abstractmethod
    def write(self, pcm16: bytes) -> bytes: ...

    @abc.abstractmethod
    def close(self) -> bytes: ...


class PcmWriter(SpeechFileWriter):
    def write(self, pcm16: bytes) -> bytes:
        return pcm16

    def close(self) -> bytes:
        return b""


def wav_header(rate: int = SPEECH_RATE) -> bytes:
    """A PCM WAV header for a stream of unknown length (both sizes 0xFFFFFFFF)."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, 16-bit
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", unknown)
    )


class WavWriter(SpeechFileWriter):
    def __init__(self) -> None:
        self._header: bytes | None = wav_header()

    def write(self, pcm16: bytes) -> bytes:
        head, self._header = self._header or b"", None
        return head + pcm16

    def close(self) -> bytes:
        head, self._header = self._header or b"", None
        return head  # an empty response is still a valid (empty) file


class _Sink:
    """Where the muxer writes: bytes kept until taken."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class ContainerWriter(SpeechFileWriter):
    """A PyAV encoder and muxer writing to memory. `flush_packets` makes the muxer hand each
    packet over at once instead of filling a 32 KB I/O buffer first; Ogg pages are cut every
    20 ms for the same reason (its default holds a second of audio)."""

    def __init__(self, fmt: SpeechFormat) -> None:
        assert fmt.codec is not None and fmt.container is not None, fmt
        self._sink = _Sink()
        options = {"flush_packets": "1"}
        if fmt.container == "ogg":
            options["page_duration"] = "20000"  # µs
        self._container = av.open(self._sink, "w", format=fmt.container, container_options=options)
        self._stream = self._container.add_stream(fmt.codec, rate=SPEECH_RATE, layout="mono")
        self._samples = 0
        self._closed = False

    def write(self, pcm16: bytes) -> bytes:
        samples = np.frombuffer(pcm16, dtype="<i2")
        if len(samples) == 0:
            return b""
        frame = av.AudioFrame.from_ndarray(
            samples.astype(np.int16, copy=False)[None, :], format="s16", layout="mono"
        )
        frame.sample_rate = SPEECH_RATE
        frame.time_base = fractions.Fraction(1, SPEECH_RATE)
        frame.pts = self._samples
        self._samples += len(samples)
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def close(self) -> bytes:
        if not self._closed:
            self._closed = True
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        return self._sink.take()


def open_writer(fmt: SpeechFormat) -> SpeechFileWriter:
    if fmt.name == "pcm":
        return PcmWriter()
    if fmt.name == "wav":
        return WavWriter()
    return ContainerWriter(fmt)
