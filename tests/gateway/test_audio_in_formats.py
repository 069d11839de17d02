"""Every input format the protocol allows (gateway/protocol_codes.py's SAMPLE_RATES) decodes a
known signal to that signal at the model's rate: the encoder is libavcodec's (libopus for
Opus), the decoder gateway/audio_in.py's AudioDecoder."""

from __future__ import annotations

import av
import numpy as np
import pytest

from gateway.audio import make_encoder
from gateway.audio_in import AudioDecoder
from gateway.protocol import SAMPLE_RATES, AudioFormat, AudioSpec

MODEL_RATE = 16000
TONE_HZ = 440


def tone(rate: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)


def g711(codec: str, pcm: np.ndarray, rate: int) -> bytes:
    encoder = av.CodecContext.create(codec, "w")
    encoder.sample_rate, encoder.layout, encoder.format = rate, "mono", "s16"
    frame = av.AudioFrame.from_ndarray(
        (pcm * 32767).astype(np.int16)[None, :], format="s16", layout="mono"
    )
    frame.sample_rate, frame.pts = rate, 0
    return b"".join(bytes(p) for p in [*encoder.encode(frame), *encoder.encode(None)])


def wire_frames(fmt: AudioFormat, rate: int) -> list[bytes]:
    """One second of the tone as 20 ms wire frames of `fmt` at `rate`."""
    pcm = tone(rate)
    if fmt is AudioFormat.OPUS:
        encoder = make_encoder(AudioSpec(), rate)
        return encoder.encode(pcm) + encoder.flush()
    if fmt is AudioFormat.PCM16:
        data = (pcm * 32767).astype("<i2").tobytes()
    else:
        data = g711({AudioFormat.MULAW: "pcm_mulaw", AudioFormat.ALAW: "pcm_alaw"}[fmt], pcm, rate)
    step = len(data) // len(pcm) * rate // 50
    return [data[i : i + step] for i in range(0, len(data), step)]


def best_correlation(decoded: np.ndarray, reference: np.ndarray, max_lag: int = 400) -> float:
    """The correlation at the lag that fits best (codecs and resamplers delay the signal)."""
    n = min(len(decoded), len(reference)) - 2 * max_lag
    return max(
        float(
            np.corrcoef(decoded[lag + max_lag : lag + max_lag + n], reference[max_lag:][:n])[0, 1]
        )
        for lag in range(-max_lag, max_lag, 4)
    )


CASES = [(fmt, rate) for fmt, rates in SAMPLE_RATES.items() for rate in rates]


@pytest.mark.parametrize(("fmt", "rate"), CASES, ids=[f"{f.value}-{r}" for f, r in CASES])
def test_every_input_format_decodes_a_known_signal(fmt, rate):
    decoder = AudioDecoder(AudioSpec(fmt, rate, 20), MODEL_RATE)
    decoded = np.concatenate([decoder.decode(frame) for frame in wire_frames(fmt, rate)])
    reference = tone(MODEL_RATE)
    assert abs(len(decoded) - len(reference)) < MODEL_RATE // 20  # about one second
    assert best_correlation(decoded, reference) > 0.99
    level = float(np.sqrt(np.mean(decoded[MODEL_RATE // 10 :] ** 2)))
    assert level == pytest.approx(0.5 / np.sqrt(2), rel=0.1)
