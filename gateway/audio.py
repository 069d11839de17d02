"""Output audio: model PCM in, wire frames out (Opus packets, pcm16, μ-law or A-law chunks).

Resampling is libswresample and the codecs are libopus / libavcodec, through PyAV, except that
Opus from a rate it takes as it is (the models' 24 kHz) calls libopus directly
(`DirectOpusEncoder`, gateway.opus_lib says why): none of it is hand-written. An encoder
belongs to one response; it keeps the resampler's filter history
and the Opus state across the response's engine chunks (and across its sentence segments, so
they join without clicks), and is flushed once at the end.

Every frame an encoder returns holds exactly `spec.frame_ms` of audio: the resampler cuts fixed
frames, and the last, partial one is padded with silence. Clients can then size jitter buffers
in frames, and `audio_ms` is simply frames × frame_ms.
"""

from __future__ import annotations

import abc
import asyncio
import ctypes
import fractions
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable

import av
import numpy as np

from gateway.opus_lib import MAX_PACKET, NATIVE_RATES, OpusLib, load_opus
from gateway.protocol import AudioFormat, AudioSpec


def sanitized(pcm: np.ndarray) -> np.ndarray:
    """Model audio as float32 within [-1, 1]. A diverging model can emit NaN/inf, which a
    resampler or codec would turn into full-scale noise."""
    return np.clip(np.nan_to_num(pcm.astype(np.float32, copy=False)), -1.0, 1.0)


class AudioEncoder(abc.ABC):
    # libavcodec sample format the codec consumes
    sample_format = "s16"

    def __init__(self, spec: AudioSpec, source_rate: int) -> None:
        self.spec = spec
        self.source_rate = source_rate
        self._samples_in = 0
        self._samples_out = 0
        self._resampler = av.AudioResampler(
            format=self.sample_format,
            layout="mono",
            rate=spec.sample_rate,
            frame_size=spec.samples_per_frame,
        )

    def waited(self, queued_s: float) -> bool:
        """The coming call waited `queued_s` for its worker (see HURRIED_COMPLEXITY); True
        if it runs hurried. libavcodec's encoders take their options once, at open: they
        never hurry."""
        return False

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        """pcm: float32 [n_samples] mono at `source_rate`. Returns the frames now complete."""
        if len(pcm) == 0:
            return []
        clean = sanitized(pcm)
        frame = av.AudioFrame.from_ndarray(clean[None, :], format="flt", layout="mono")
        frame.sample_rate = self.source_rate
        frame.time_base = fractions.Fraction(1, self.source_rate)
        frame.pts = self._samples_in
        self._samples_in += len(clean)
        packets: list[bytes] = []
        for out in self._resampler.resample(frame):
            packets.extend(self._encode_frame(out))
        return packets

    def flush(self) -> list[bytes]:
        """The rest of the response: resampler tail padded to a whole frame, codec tail."""
        packets: list[bytes] = []
        for out in self._resampler.resample(None):
            packets.extend(self._encode_frame(self._padded(out)))
        packets.extend(self._drain())
        return packets

    def _padded(self, frame: av.AudioFrame) -> av.AudioFrame:
        want = self.spec.samples_per_frame
        if frame.samples == want:
            return frame
        samples = frame.to_ndarray()  # [1, n]
        padded = np.zeros((1, want), dtype=samples.dtype)
        padded[:, : samples.shape[1]] = samples
        out = av.AudioFrame.from_ndarray(padded, format=self.sample_format, layout="mono")
        out.sample_rate = self.spec.sample_rate
        return out

    def _next_pts(self, frame: av.AudioFrame) -> int:
        pts = self._samples_out
        self._samples_out += frame.samples
        return pts

    @abc.abstractmethod
    def _encode_frame(self, frame: av.AudioFrame) -> list[bytes]:
        """One whole frame at the wire rate → zero or more wire frames."""

    def _drain(self) -> list[bytes]:
        return []


class Pcm16Encoder(AudioEncoder):
    def _encode_frame(self, frame: av.AudioFrame) -> list[bytes]:
        # libavcodec's s16 is host-endian; the wire is little-endian whatever the host.
        return [frame.to_ndarray().astype("<i2", copy=False).tobytes()]


class _CodecEncoder(AudioEncoder):
    codec_name = ""

    def __init__(self, spec: AudioSpec, source_rate: int) -> None:
        super().__init__(spec, source_rate)
        self._codec = av.CodecContext.create(self.codec_name, "w")
        self._codec.sample_rate = spec.sample_rate
        self._codec.layout = "mono"
        self._codec.format = self.sample_format
        self._codec.time_base = fractions.Fraction(1, spec.sample_rate)
        self._configure(self._codec)
        self._codec.open()

    def _configure(self, codec: av.CodecContext) -> None:  # noqa: B027 - optional hook
        pass

    def _encode_frame(self, frame: av.AudioFrame) -> list[bytes]:
        frame.pts = self._next_pts(frame)
        frame.time_base = self._codec.time_base
        return [bytes(p) for p in self._codec.encode(frame)]

    def _drain(self) -> list[bytes]:
        return [bytes(p) for p in self._codec.encode(None)]


class MulawEncoder(_CodecEncoder):
    codec_name = "pcm_mulaw"


class AlawEncoder(_CodecEncoder):
    codec_name = "pcm_alaw"


class OpusEncoder(_CodecEncoder):
    """One raw Opus packet (no Ogg) per wire frame, 48 kHz mono."""

    codec_name = "libopus"
    sample_format = "flt"

    def __init__(self, spec: AudioSpec, source_rate: int, bitrate: int = 32000) -> None:
        self._bitrate = bitrate
        super().__init__(spec, source_rate)

    def _configure(self, codec: av.CodecContext) -> None:
        codec.bit_rate = self._bitrate
        # frame_duration sets the packet length; the resampler hands over frames of that size.
        codec.options = {"frame_duration": str(self.spec.frame_ms), "application": "audio"}


# Opus's complexity, traded against CPU under load. libopus's default, 10, costs ~0.23 ms of a
# core per 20-ms frame at 24 kHz (86x real time on a 2-core x86 VM); 6 and below drop the
# analysis that costs most and take ~0.05 ms (385x), at ~3 dB less SNR and ~0.7 dB more
# log-spectral distance on speech at 32 kbit/s (bench/opus_complexity.py). At 256 Orpheus
# streams complexity 10 is ~3 cores of encoding: the worker processes' queue then grows, and
# its waits, not the engine, made the frames late (docs/benchmark-history.md). So an encode
# that waited `--opus-hurry-ms` (20: a frame) or more for its worker (thread or process) runs at
# HURRIED_COMPLEXITY, and the next one that did not wait goes back to full quality: quality
# gives way only while the encoders are behind, and the queue drains four times faster while it
# does. An encoder made without a threshold (None: tests, tools) never hurries, so its bytes
# do not depend on timing.
FULL_COMPLEXITY = 10
HURRIED_COMPLEXITY = 6


class DirectOpusEncoder:
    """Opus straight from the model's rate, through libopus itself (gateway.opus_lib): one
    foreign call per frame, which releases the GIL for all of it, and no resampler, so a
    chunk's frames all come out of its own encode (none held back for the next). Same wire
    format as OpusEncoder: one raw packet per frame, decoded at 48 kHz by the client."""

    def __init__(
        self,
        spec: AudioSpec,
        source_rate: int,
        bitrate: int,
        lib: OpusLib,
        hurry_after_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.hurry_after_s = hurry_after_s
        self.source_rate = source_rate
        self._lib = lib
        self._encoder = lib.create(source_rate, bitrate)
        weakref.finalize(self, lib.destroy, self._encoder)
        self._out = ctypes.create_string_buffer(MAX_PACKET)
        self._frame = source_rate * spec.frame_ms // 1000
        self._pending = np.zeros(0, np.float32)  # less than a frame, kept for the next call
        self._hurried = False

    def waited(self, queued_s: float) -> bool:
        """AudioEncoder.waited: a call that waited `hurry_after_s` or more encodes at
        HURRIED_COMPLEXITY (libopus takes a new complexity between any two frames)."""
        hurried = self.hurry_after_s is not None and queued_s >= self.hurry_after_s
        if hurried != self._hurried:
            complexity = HURRIED_COMPLEXITY if hurried else FULL_COMPLEXITY
            self._lib.set_complexity(self._encoder, complexity)
            self._hurried = hurried
        return hurried

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        """pcm: float32 [n_samples] mono at `source_rate`. Returns the frames now complete."""
        if len(pcm) == 0:
            return []
        clean = sanitized(pcm)
        samples = np.concatenate([self._pending, clean]) if len(self._pending) else clean
        whole = len(samples) // self._frame * self._frame
        frames = np.ascontiguousarray(samples[:whole]).reshape(-1, self._frame)
        self._pending = samples[whole:].copy()
        return [self._lib.encode(self._encoder, frame, self._out) for frame in frames]

    def flush(self) -> list[bytes]:
        """The rest of the response, padded with silence to a whole frame."""
        if len(self._pending) == 0:
            return []
        last = np.zeros(self._frame, np.float32)
        last[: len(self._pending)] = self._pending
        self._pending = np.zeros(0, np.float32)
        return [self._lib.encode(self._encoder, last, self._out)]


def make_encoder(
    spec: AudioSpec,
    source_rate: int,
    opus_bitrate: int = 32000,
    hurry_after_s: float | None = None,
) -> AudioEncoder | DirectOpusEncoder:
    """A response's encoder; `hurry_after_s`: see HURRIED_COMPLEXITY (None: never hurries)."""
    if spec.format is AudioFormat.OPUS:
        lib = load_opus() if source_rate in NATIVE_RATES else None
        if lib is not None:
            return DirectOpusEncoder(spec, source_rate, opus_bitrate, lib, hurry_after_s)
        return OpusEncoder(spec, source_rate, opus_bitrate)
    if spec.format is AudioFormat.PCM16:
        return Pcm16Encoder(spec, source_rate)
    if spec.format is AudioFormat.ALAW:
        return AlawEncoder(spec, source_rate)
    return MulawEncoder(spec, source_rate)


# Frames' worth of audio a chunk's first piece encodes (ChunkEncoder.encode_parts). A first
# chunk's listener holds these frames (one fewer where a resampler keeps the last back) while
# the rest is encoded and sent: 9 give 160 ms of cover, for ~1.5 ms more before the first
# frame. 3 (40 ms) and 6 (100 ms) are too few under a GPU engine's load: at its peaks a piece
# can take 40-190 ms to come back from the worker threads.
HEAD_FRAMES = 9
# What each encode cost, in seconds: queued (submitted, not yet started), then running; and
# whether it ran hurried (HURRIED_COMPLEXITY).
EncodeObserver = Callable[[float, float, bool], None]


def run_encode(
    encoder: AudioEncoder | DirectOpusEncoder, pcm: np.ndarray | None, queued_s: float
) -> tuple[list[bytes], bool]:
    """One call of a response's encoder on its worker (thread or process): encode `pcm`, or
    flush for None, told first how long the call waited for the worker. Returns the frames
    and whether the call ran hurried."""
    hurried = encoder.waited(queued_s)
    return (encoder.flush() if pcm is None else encoder.encode(pcm)), hurried


class ChunkEncoder(abc.ABC):
    """A response's encoder as the event loop sees it: awaitable, its work never on the loop
    (OffLoopEncoder: worker threads of this process; gateway.codec_workers: processes)."""

    source_rate: int
    spec: AudioSpec
    # When the listener will need the audio of the next call, in time.monotonic() seconds (the
    # reply's playback clock: ReplyLifecycle.play sets it); None: not known. Encoders in
    # worker processes run the calls that wait together by it (gateway.codec_workers).
    needed_by: Callable[[], float] | None = None

    @abc.abstractmethod
    async def encode(self, pcm: np.ndarray) -> list[bytes]:
        """AudioEncoder.encode, off the loop."""

    @abc.abstractmethod
    async def flush(self) -> list[bytes]:
        """AudioEncoder.flush, off the loop."""

    def close(self) -> None:  # noqa: B027 - only encoders holding outside resources need it
        """Free what the encoder holds outside this process (nothing, by default)."""

    async def encode_parts(self, pcm: np.ndarray) -> AsyncIterator[list[bytes]]:
        """encode(pcm) in two pieces whose frames are sent as each is done: the first
        HEAD_FRAMES frames' worth, then the rest, while the head plays. Why: a chunk often
        comes when its listener's audio is nearly out (the scheduler serves the closest to
        running dry first), and one encode of the whole chunk would hold every frame back for
        all of it: a 1.28 s chunk's 64 frames take ~15-20 ms, its head's 1-2 ms, and where a
        resampler holds the previous chunk's last frame back, it comes out only with the
        next encode, and under load that frame is the one that comes late. Not more pieces:
        each is a trip through the worker threads, which at 100 streams is what costs (pieces
        doubling in length make three or four trips a chunk, and first chunks then come late
        at the piece boundaries). The frames are the same bytes as one encode gives."""
        size = HEAD_FRAMES * self.source_rate * self.spec.frame_ms // 1000
        if len(pcm) > 2 * size:
            yield await self.encode(pcm[:size])
            pcm = pcm[size:]
        yield await self.encode(pcm)


class OffLoopEncoder(ChunkEncoder):
    """An encoder whose work runs on a worker thread, not on the event loop.

    Why: Opus at its default complexity costs ~20 ms of CPU per second of audio (2 CPU cores
    here: `bench/gateway_encode_load.py`), so a gateway streaming 46 audio-seconds a second
    (CosyVoice 2 at 6 req/s on the H200) would spend about a whole core encoding, in ~20 ms
    slices that each hold up every other session's pacing, handshakes and first frames. The
    codecs release the GIL while they run, so the work spreads over the cores. One call at a
    time per encoder (its state is sequential): a lock also covers a call whose awaiting task
    was cancelled (barge-in) while its thread still runs."""

    def __init__(
        self, encoder: AudioEncoder | DirectOpusEncoder, observe: EncodeObserver | None = None
    ) -> None:
        self.encoder = encoder
        self.source_rate = encoder.source_rate
        self.spec = encoder.spec
        self._lock = threading.Lock()
        self._observe = observe

    async def encode(self, pcm: np.ndarray) -> list[bytes]:
        if len(pcm) == 0:
            return []
        return await self._off_loop(pcm)

    async def flush(self) -> list[bytes]:
        return await self._off_loop(None)

    async def _off_loop(self, pcm: np.ndarray | None) -> list[bytes]:
        return await asyncio.to_thread(self._locked, time.perf_counter(), pcm)

    def _locked(self, submitted: float, pcm: np.ndarray | None) -> list[bytes]:
        with self._lock:
            started = time.perf_counter()
            out, hurried = run_encode(self.encoder, pcm, started - submitted)
        if self._observe is not None:
            self._observe(started - submitted, time.perf_counter() - started, hurried)
        return out


# What sessions make their encoders with: (output spec, the model's sample rate) → encoder.
# The gateway binds the bitrate, the hurry threshold, the metrics and the backend (threads or
# processes) once.
OpenEncoder = Callable[[AudioSpec, int], ChunkEncoder]


def make_off_loop_encoder(
    spec: AudioSpec,
    source_rate: int,
    opus_bitrate: int = 32000,
    observe: EncodeObserver | None = None,
    hurry_after_s: float | None = None,
) -> OffLoopEncoder:
    """make_encoder's encoder, run off the event loop (what the gateway's sessions use);
    `observe` gets each encode's seconds queued and running, and whether it ran hurried (the
    gateway's metrics)."""
    encoder = make_encoder(spec, source_rate, opus_bitrate, hurry_after_s)
    return OffLoopEncoder(encoder, observe)
