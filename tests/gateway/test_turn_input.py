"""TurnInput on flite speech: manual turns (commit, clear, the bounded buffer) and VAD turns
(commit ends speech early, a turn that never falls silent is ended at max_turn_s)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gateway_testkit import flite_speech, quiet_room

from gateway.protocol import (
    AudioFormat,
    AudioSpec,
    ErrorCode,
    ProtocolError,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    TurnDetectionType,
)
from gateway.turn_input import TurnInput, TurnPaused, TurnResumed, UserAudioTurn

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")

RATE = 16000
SPEC = AudioSpec(AudioFormat.PCM16, RATE, 20)
MANUAL = TurnDetection(TurnDetectionType.NONE)
VAD = TurnDetection(TurnDetectionType.VAD, 400)


def pcm16(pcm: np.ndarray) -> bytes:
    return (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()


def push_all(turns: TurnInput, pcm: np.ndarray, chunk_s: float = 0.02) -> list:
    data, step, events = pcm16(pcm), int(chunk_s * RATE) * 2, []
    for at in range(0, len(data), step):
        events += turns.push(data[at : at + step])
    return events


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> np.ndarray:
    return flite_speech("Could you tell me the time please?", tmp_path_factory.mktemp("w"), RATE)


def test_manual_turns_commit_what_was_sent_and_clear_forgets_it(words):
    turns = TurnInput(SPEC, MANUAL)
    with pytest.raises(ProtocolError) as err:
        turns.commit()
    assert err.value.code is ErrorCode.BAD_FIELD and "input.commit" in err.value.message
    assert push_all(turns, quiet_room(0.05, RATE)) == []
    with pytest.raises(ProtocolError):  # 50 ms holds no word
        turns.commit()
    assert push_all(turns, words) == []  # no detection: no speech events
    turns.clear()
    with pytest.raises(ProtocolError):
        turns.commit()
    audio = np.concatenate([quiet_room(0.2, RATE), words])
    push_all(turns, audio)
    (turn,) = turns.commit()
    assert isinstance(turn, UserAudioTurn)
    np.testing.assert_allclose(turn.pcm, audio, atol=2 / 32767)  # pcm16 at 16 kHz: no resampling


def test_the_manual_buffer_keeps_the_last_max_turn_seconds(words):
    turns = TurnInput(SPEC, MANUAL, max_turn_s=1.0)
    push_all(turns, np.concatenate([words, words]))
    (turn,) = turns.commit()
    assert 1.0 <= len(turn.pcm) / RATE < 1.0 + 0.03


def test_vad_commit_ends_the_speech_in_progress(words):
    turns = TurnInput(SPEC, VAD)
    events = push_all(turns, np.concatenate([quiet_room(0.5, RATE), words[: len(words) // 2]]))
    assert [type(e) for e in events] == [SpeechStarted]
    stopped, turn = turns.commit()
    assert isinstance(stopped, SpeechStopped) and isinstance(turn, UserAudioTurn)
    assert not turns.in_speech
    with pytest.raises(ProtocolError):  # nothing in progress any more
        turns.commit()


def test_vad_turn_that_never_falls_silent_is_ended_at_max_turn_s(words):
    turns = TurnInput(SPEC, VAD, max_turn_s=1.0)
    speech = np.concatenate([words] * 3)  # no silence long enough to end a turn
    events = push_all(turns, np.concatenate([quiet_room(0.3, RATE), speech]))
    kinds = [type(e) for e in events]
    assert kinds[:3] == [SpeechStarted, SpeechStopped, UserAudioTurn]
    first = events[2]
    assert len(first.pcm) / RATE <= 1.0 + 0.3 + 0.05  # max_turn_s plus the onset prefix


def test_vad_clear_drops_the_speech_in_progress(words):
    turns = TurnInput(SPEC, VAD)
    push_all(turns, np.concatenate([quiet_room(0.5, RATE), words[: len(words) // 2]]))
    assert turns.in_speech
    turns.clear()
    assert not turns.in_speech
    events = push_all(turns, quiet_room(1.0, RATE))
    assert events == []  # no stop, no turn: it was forgotten


def test_vad_pauses_hand_over_the_turn_so_far_and_say_when_speech_resumes(words):
    """With early_ms, a pause that long inside speech hands over the turn so far (TurnPaused)
    and voice after it says so (TurnResumed); the turn goes on and ends at silence_ms as
    before, its audio beginning with what the last pause handed over. Without early_ms
    neither event comes."""
    room, gap = quiet_room(0.5, RATE), quiet_room(0.3, RATE, seed=7)  # 300 ms: > early, < silence
    audio = np.concatenate([room, words, gap, words, quiet_room(1.0, RATE, seed=8)])
    plain = push_all(TurnInput(SPEC, VAD), audio)
    events = push_all(TurnInput(SPEC, VAD, early_ms=200), audio)
    assert not any(isinstance(e, TurnPaused | TurnResumed) for e in plain)
    kinds = [type(e) for e in events if not isinstance(e, TurnPaused | TurnResumed)]
    assert kinds == [type(e) for e in plain] == [SpeechStarted, SpeechStopped, UserAudioTurn]
    marks = [type(e) for e in events if isinstance(e, TurnPaused | TurnResumed)]
    assert marks[-3:] == [TurnPaused, TurnResumed, TurnPaused]  # the gap, then the end
    assert all(a is not b for a, b in zip(marks, marks[1:], strict=False))  # they alternate
    last_pause = [e for e in events if isinstance(e, TurnPaused)][-1].turn.pcm
    turn = events[-1].pcm
    assert len(words) * 2 < len(last_pause) < len(turn)
    np.testing.assert_array_equal(turn[: len(last_pause)], last_pause)
