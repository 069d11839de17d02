"""Microphone Opus decoded straight to the model's rate by libopus itself
(gateway/audio_in.py's DirectOpusDecoder): the same signal as PyAV's route (decode at 48 kHz,
then resample), every packet's audio at once, and a broken packet a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import gateway.audio_in as audio_in
from gateway.audio import make_encoder
from gateway.audio_in import AudioDecoder, UndecodableAudio
from gateway.opus_lib import load_opus
from gateway.protocol import AudioSpec

pytestmark = pytest.mark.skipif(load_opus() is None, reason="libopus cannot be called directly")


def packets(rate: int = 24000, seconds: float = 1.0) -> list[bytes]:
    t = np.arange(int(seconds * rate)) / rate
    pcm = 0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(3 * t))
    encoder = make_encoder(AudioSpec(), rate)
    return encoder.encode(pcm.astype(np.float32)) + encoder.flush()


def aligned_error(a: np.ndarray, b: np.ndarray, max_lag: int = 64) -> float:
    """RMS of a - b over RMS of b at the lag that fits best (the routes' filters delay the
    signal differently)."""
    n = min(len(a), len(b)) - max_lag
    best = min(
        range(max_lag),
        key=lambda lag: float(np.mean((a[lag : lag + n] - b[:n]) ** 2)),
    )
    a, b = a[best : best + n], b[:n]
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b**2)))


@pytest.mark.parametrize("rate", [24000, 16000])
def test_direct_decoding_is_pyav_decoding_and_resampling(rate, monkeypatch):
    wire = packets()
    direct = AudioDecoder(AudioSpec(), rate)
    assert direct._direct is not None
    pieces = [direct.decode(p) for p in wire]
    assert all(len(p) == rate * 20 // 1000 for p in pieces)  # each packet whole, at once
    monkeypatch.setattr(audio_in, "load_opus", lambda: None)
    resampled = AudioDecoder(AudioSpec(), rate)
    assert resampled._direct is None
    other = np.concatenate([resampled.decode(p) for p in wire])
    mine = np.concatenate(pieces)
    assert abs(len(mine) - len(other)) < rate // 100  # the resampler holds a few back
    # Measured 4e-5 at 24 kHz and 3.4 % at 16 kHz, where the routes' low-pass filters differ;
    # the same audio at half its level is off by 50 %.
    assert aligned_error(mine, other) < 0.05


def test_a_rate_opus_does_not_decode_to_goes_through_the_resampler():
    assert AudioDecoder(AudioSpec(), 22050)._direct is None


def test_a_broken_packet_is_a_clear_error():
    decoder = AudioDecoder(AudioSpec(), 24000)
    with pytest.raises(UndecodableAudio, match="undecodable opus frame"):
        decoder.decode(b"\xff" * 3)
    assert len(decoder.decode(packets()[0])) == 480  # the decoder still works after it
