"""libopus's encoder and decoder, called directly (ctypes) instead of through libavcodec.

Why: the gateway encodes every stream's audio on worker threads that share the GIL with its
event loop, and each time a thread comes back from C it waits up to a switch interval for
the GIL. PyAV goes back and forth several times per 20-ms frame (a resampled AudioFrame, the
codec's send and receive, a Packet object), so in a busy gateway a 640-ms chunk's encode took
~40 ms instead of ~7 (bench/encode_convoy.py, one busy Python thread beside it; at 11 req/s
of CosyVoice 2 on the H200 the encodes averaged 29 ms). Here each frame is
one foreign call, which releases the GIL for the whole frame's encode, and Opus takes 8, 12,
16, 24 and 48 kHz input as it is, so the models' 24 kHz audio needs no resampler either.
Decoding the users' microphones is the mirror (gateway/audio_in.py): one call per packet,
straight to the model's rate, where PyAV's decoder and resampler cost the event loop ~66 µs a
20-ms packet (6,400 packets a second for 128 full-duplex sessions). Unlike the encoder's, the
decoder's calls keep the GIL: they run on the event loop itself, and are short.

The library is the libopus PyAV's wheel bundles (the same one libavcodec used), or the
system's. `load_opus()` returns None where neither can be loaded or the variadic control
call does not work through ctypes; the caller then keeps the PyAV encoder."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import logging
import os

import numpy as np

log = logging.getLogger("voxgate.gateway")

# Input rates Opus encodes as they are (anything else is resampled to 48 kHz first).
NATIVE_RATES = frozenset({8000, 12000, 16000, 24000, 48000})
# From opus_defines.h.
_APPLICATION_AUDIO = 2049
_SET_BITRATE = 4002
_GET_BITRATE = 4003
_SET_COMPLEXITY = 4010
# An Opus packet is at most 1275 bytes per frame (RFC 6716, 3.2.1).
MAX_PACKET = 1275


# Milliseconds of one frame by a packet's configuration (RFC 6716, 3.1: the TOC byte's top five
# bits): SILK 10/20/40/60, hybrid 10/20, CELT 2.5/5/10/20.
_FRAME_MS = [10, 20, 40, 60] * 3 + [10, 20] * 2 + [2.5, 5, 10, 20] * 4


def packet_ms(packet: bytes) -> float | None:
    """How much audio an Opus packet holds, read from its TOC byte (and frame count byte), or
    None for a packet too short to say."""
    if not packet:
        return None
    toc = packet[0]
    frame_ms = _FRAME_MS[toc >> 3]
    code = toc & 3
    if code == 0:
        return frame_ms
    if code in (1, 2):
        return 2 * frame_ms
    return (packet[1] & 0x3F) * frame_ms if len(packet) > 1 else None


class OpusError(RuntimeError):
    pass


_INT, _PTR = ctypes.c_int, ctypes.c_void_p
# libopus' calls used here: name → (result type, argument types).
_ENCODER_CALLS = {
    "opus_encoder_create": (_PTR, [ctypes.c_int32, _INT, _INT, ctypes.POINTER(_INT)]),
    "opus_encode_float": (ctypes.c_int32, [_PTR, _PTR, _INT, _PTR, ctypes.c_int32]),
    "opus_encoder_destroy": (None, [_PTR]),
    "opus_strerror": (ctypes.c_char_p, [_INT]),
}
_DECODER_CALLS = {
    "opus_decoder_create": (_PTR, [ctypes.c_int32, _INT, ctypes.POINTER(_INT)]),
    "opus_decode_float": (_INT, [_PTR, ctypes.c_char_p, ctypes.c_int32, _PTR, _INT, _INT]),
    "opus_decoder_destroy": (None, [_PTR]),
}


def _declare(lib: ctypes.CDLL, calls: dict) -> None:
    """Give each of `calls` its C signature on `lib`."""
    for name, (restype, argtypes) in calls.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes


class OpusLib:
    """The few libopus calls the encoder and the decoder need, typed."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        _declare(lib, _ENCODER_CALLS)
        # The decoder runs on the gateway's event loop, 20 µs a packet: through a handle that
        # keeps the GIL (PyDLL), since a call that lets it go must win it back on return, and
        # behind busy threads that wait cost ~100 µs a packet (bench/duplex_gateway_load.py).
        self._held = ctypes.PyDLL(lib._name)
        _declare(self._held, _DECODER_CALLS)
        # opus_encoder_ctl is variadic: left untyped, ctypes passes the ints as C varargs.
        # Whether that works on this platform is checked once, by load_opus.

    def error(self, code: int) -> str:
        return self._lib.opus_strerror(code).decode()

    def create(self, rate: int, bitrate: int) -> ctypes.c_void_p:
        """A mono encoder for `rate` Hz input at `bitrate` bits/s (application "audio", as
        libavcodec's libopus encoder sets it; VBR and complexity 10 are libopus's defaults)."""
        err = ctypes.c_int()
        handle = self._lib.opus_encoder_create(rate, 1, _APPLICATION_AUDIO, ctypes.byref(err))
        if err.value != 0 or not handle:
            raise OpusError(f"opus_encoder_create({rate} Hz): {self.error(err.value)}")
        encoder = ctypes.c_void_p(handle)
        code = self._lib.opus_encoder_ctl(
            encoder, ctypes.c_int(_SET_BITRATE), ctypes.c_int(bitrate)
        )
        got = ctypes.c_int32()
        self._lib.opus_encoder_ctl(encoder, ctypes.c_int(_GET_BITRATE), ctypes.byref(got))
        if code != 0 or got.value != bitrate:
            self.destroy(encoder)
            raise OpusError(f"opus_encoder_ctl could not set the bitrate to {bitrate}")
        return encoder

    def set_complexity(self, encoder: ctypes.c_void_p, complexity: int) -> None:
        """The encoder's complexity from the next frame on (0-10; the stream stays one
        stream: the decoder neither knows nor cares)."""
        code = self._lib.opus_encoder_ctl(
            encoder, ctypes.c_int(_SET_COMPLEXITY), ctypes.c_int(complexity)
        )
        if code != 0:
            raise OpusError(f"opus_encoder_ctl could not set the complexity to {complexity}")

    def encode(self, encoder: ctypes.c_void_p, frame: np.ndarray, out: ctypes.Array) -> bytes:
        """One frame (float32, C-contiguous, a length Opus allows) → one packet."""
        n = self._lib.opus_encode_float(encoder, frame.ctypes.data, len(frame), out, len(out))
        if n < 0:
            raise OpusError(f"opus_encode_float: {self.error(n)}")
        return out.raw[:n]

    def destroy(self, encoder: ctypes.c_void_p) -> None:
        self._lib.opus_encoder_destroy(encoder)

    def create_decoder(self, rate: int) -> ctypes.c_void_p:
        """A mono decoder whose output is at `rate` Hz (one of NATIVE_RATES: Opus decodes any
        stream at any of them, whatever rate it was encoded at)."""
        err = ctypes.c_int()
        handle = self._held.opus_decoder_create(rate, 1, ctypes.byref(err))
        if err.value != 0 or not handle:
            raise OpusError(f"opus_decoder_create({rate} Hz): {self.error(err.value)}")
        return ctypes.c_void_p(handle)

    def decode(self, decoder: ctypes.c_void_p, packet: bytes, out: np.ndarray) -> int:
        """One packet → samples written to `out` (float32, room for the longest packet);
        returns how many, or raises OpusError for a packet libopus cannot decode."""
        n = self._held.opus_decode_float(decoder, packet, len(packet), out.ctypes.data, len(out), 0)
        if n < 0:
            raise OpusError(self.error(n))
        return n

    def destroy_decoder(self, decoder: ctypes.c_void_p) -> None:
        self._held.opus_decoder_destroy(decoder)


def _candidates() -> list[str]:
    import av

    bundled = os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs")
    found = sorted(glob.glob(os.path.join(bundled, "libopus*.so*")))
    found += sorted(glob.glob(os.path.join(os.path.dirname(av.__file__), ".dylibs", "libopus*")))
    system = ctypes.util.find_library("opus")
    return found + ([system] if system else [])


@functools.cache
def load_opus() -> OpusLib | None:
    """libopus, checked to work (an encoder made, its bitrate set and read back, a frame
    encoded), or None."""
    for path in _candidates():
        try:
            lib = OpusLib(ctypes.CDLL(path))
            encoder = lib.create(24000, 32000)
            try:
                lib.encode(
                    encoder, np.zeros(480, np.float32), ctypes.create_string_buffer(MAX_PACKET)
                )
            finally:
                lib.destroy(encoder)
        except (OSError, AttributeError, OpusError) as exc:
            log.debug("libopus at %s not usable: %s", path, exc)
            continue
        return lib
    log.warning(
        "libopus could not be called directly; Opus output goes through PyAV's encoder, "
        "which costs the gateway more GIL time per frame"
    )
    return None
