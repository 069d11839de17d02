"""A reply's encoder at another speed (gateway/stretched_audio.py): the frames of the stretched
audio whatever the chunks, nothing added at speed 1, and the clocks it converts between."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.audio import make_off_loop_encoder
from gateway.protocol import AudioFormat, AudioSpec
from gateway.stretched_audio import PlayedTime, StretchingEncoder, at_speed
from gateway.time_stretch import TimeStretcher

RATE = 24000
SPEC = AudioSpec(AudioFormat.PCM16, 16000, 20)  # resampled too: the stretch comes first


def voice(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 150 * t) + 0.1 * np.sin(2 * np.pi * 450 * t)).astype(
        np.float32
    )


async def played(encoder, chunks: list[np.ndarray]) -> bytes:
    frames: list[bytes] = []
    for chunk in chunks:
        async for part in encoder.encode_parts(chunk):
            frames += part
    return b"".join(frames + await encoder.flush())


@pytest.mark.parametrize("speed", [0.5, 1.5])
async def test_the_frames_are_the_stretched_audio_encoded_whatever_the_chunks(speed):
    pcm = voice(1.3)
    stretcher = TimeStretcher(speed, RATE)
    whole = np.concatenate([stretcher.push(pcm), stretcher.flush()])
    want = await played(make_off_loop_encoder(SPEC, RATE), [whole])
    chunks = np.array_split(pcm, [5000, 5100, 19000])  # uneven engine chunks
    got = await played(at_speed(make_off_loop_encoder(SPEC, RATE), speed), chunks)
    assert got == want
    # 16 kHz PCM16: 1/speed of the audio, padded to a whole 20 ms frame.
    assert abs(len(got) / 2 / 16000 - len(pcm) / RATE / speed) <= 0.02


def test_speed_one_adds_nothing():
    inner = make_off_loop_encoder(SPEC, RATE)
    assert at_speed(inner, 1.0) is inner
    assert isinstance(at_speed(inner, 1.25), StretchingEncoder)
    assert PlayedTime().delivery_hold_s(SPEC, RATE) == pytest.approx(0.02)


def test_played_and_model_time():
    fast = PlayedTime(2.0)
    assert fast.model_s(0.4) == pytest.approx(0.8) and fast.played_s(0.8) == pytest.approx(0.4)
    # The engine's hold: the last frame (20 ms heard = 40 ms of the model's audio) and what the
    # stretcher keeps for the next chunk.
    hold = TimeStretcher(2.0, RATE).max_hold_s
    assert fast.delivery_hold_s(SPEC, RATE) == pytest.approx(0.04 + hold)
