"""Turn detection on real synthesized speech (Debian's flite, installed by `make test`):
speech after silence starts a turn, `silence_ms` of silence ends it, and the turn's audio is
handed over once."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gateway_testkit import flite_speech, quiet_room

from gateway.protocol import SpeechStarted, SpeechStopped
from gateway.vad import VAD_RATE, TurnDetector, VadSettings


def speech(text: str, tmp_path) -> np.ndarray:
    return flite_speech(text, tmp_path, VAD_RATE)


def silence(seconds: float, seed: int = 0) -> np.ndarray:
    return quiet_room(seconds, VAD_RATE, seed)


pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")


def feed_in_chunks(detector: TurnDetector, audio: np.ndarray, sizes: list[int]) -> list:
    events, at, i = [], 0, 0
    while at < len(audio):
        n = sizes[i % len(sizes)]
        events += detector.feed(audio[at : at + n])
        at, i = at + n, i + 1
    return events


def test_speech_then_silence_makes_one_turn_with_dated_events(tmp_path):
    words = speech("Hello there, could you tell me the time please?", tmp_path)
    audio = np.concatenate([silence(1.0), words, silence(1.2, seed=1)])
    detector = TurnDetector(VadSettings(silence_ms=500))
    events = detector.feed(audio)
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    start_ms, stop_ms = events[0].audio_ms, events[1].audio_ms
    speech_ms = 1000 * len(words) / VAD_RATE
    assert abs(start_ms - 1000) <= 120  # onset within a few frames of the first word
    assert abs(stop_ms - (1000 + speech_ms)) <= 250  # end near the last word (trailing decay)
    turn = detector.take_turn()
    assert detector.take_turn() is None  # handed over once
    # The turn spans prefix + speech + the closing silence, and holds all the speech energy.
    expected_s = (stop_ms - start_ms + 300 + 500) / 1000
    assert abs(len(turn) / VAD_RATE - expected_s) <= 0.1
    assert np.sum(turn**2) >= 0.99 * np.sum(words**2)


def test_events_do_not_depend_on_how_audio_is_chunked(tmp_path):
    words = speech("One two three.", tmp_path)
    audio = np.concatenate([silence(0.5), words, silence(0.8, seed=2)])
    whole = TurnDetector().feed(audio)
    chunked = feed_in_chunks(TurnDetector(), audio, [7, 320, 1000, 161, 4800])
    assert chunked == whole and len(whole) == 2


def test_a_short_pause_continues_the_turn_and_a_long_one_ends_it(tmp_path):
    first = speech("Good morning.", tmp_path)
    second = speech("How are you?", tmp_path)
    short = np.concatenate([silence(0.3), first, silence(0.2, 3), second, silence(1.0, 4)])
    events = TurnDetector(VadSettings(silence_ms=600)).feed(short)
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    long = np.concatenate([silence(0.3), first, silence(1.0, 3), second, silence(1.0, 4)])
    events = TurnDetector(VadSettings(silence_ms=600)).feed(long)
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped] * 2


def test_a_quiet_room_starts_no_turn():
    detector = TurnDetector()
    assert detector.feed(silence(3.0)) == [] and detector.take_turn() is None
    assert not detector.in_speech


def test_settings_are_checked():
    with pytest.raises(ValueError, match="aggressiveness"):
        VadSettings(aggressiveness=4)
    with pytest.raises(ValueError, match="silence_ms"):
        VadSettings(silence_ms=5)
