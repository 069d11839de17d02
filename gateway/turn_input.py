"""A turn-based session's microphone: wire audio frames in, voice-activity events and finished
user turns out (16 kHz float32, what a speech tokenizer reads).

Two modes (docs/protocol.md `turn_detection`):

- `vad`: every frame goes through the session's TurnDetector (gateway/vad.py); speech starts
  and stops on its own, and the turn's audio is handed over at `input.speech_stopped`. A
  commit ends the speech in progress at once. A turn that runs past `max_turn_s` is ended
  there, so a microphone that never falls silent cannot grow a turn without bound. With
  `early_ms`, a pause that long hands over the turn so far (`TurnPaused`: a reply may start on
  it before the turn is known to have ended), and voice after it says so (`TurnResumed`).
- `none`: frames are buffered (the last `max_turn_s` of them) until the client commits.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from gateway.audio_in import AudioDecoder
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ProtocolError,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    TurnDetectionType,
)
from gateway.vad import (
    FRAME_MS,
    VAD_RATE,
    SpeechPaused,
    SpeechResumed,
    TurnDetector,
    VadEvent,
    VadSettings,
)

MIN_TURN_MS = 100  # shorter commits hold no word: the speech tokenizer gives ~1 token


@dataclass(frozen=True)
class UserAudioTurn:
    """The audio of one finished user turn."""

    pcm: np.ndarray  # float32 [samples] at VAD_RATE (16 kHz)
    turn_id: str = ""  # its id in the conversation's history, given when it is committed

    @property
    def audio_ms(self) -> int:
        return round(1000 * len(self.pcm) / VAD_RATE)


@dataclass(frozen=True)
class TurnPaused:
    """The speech paused for `early_ms`: the turn so far, which may turn out to be all of it."""

    turn: UserAudioTurn


@dataclass(frozen=True)
class TurnResumed:
    """The user spoke again after a TurnPaused: the turn goes on."""


InputEvent = SpeechStarted | SpeechStopped | UserAudioTurn | TurnPaused | TurnResumed


class TurnInput:
    def __init__(
        self,
        spec: AudioSpec,
        detection: TurnDetection,
        max_turn_s: float = 60.0,
        early_ms: int = 0,
    ) -> None:
        self.detection = detection
        self._decoder = AudioDecoder(spec, VAD_RATE)
        self._max_turn_ms = int(max_turn_s * 1000)
        self._detector: TurnDetector | None = None
        if detection.type is TurnDetectionType.VAD:
            silence_ms = max(FRAME_MS, detection.silence_ms)
            self._detector = TurnDetector(VadSettings(silence_ms=silence_ms, early_ms=early_ms))
        self._speech_from_ms: int | None = None  # start of the speech in progress (vad)
        # Manual mode's buffer: the last max_turn_s of audio, as decoded chunks.
        self._chunks: collections.deque[np.ndarray] = collections.deque()
        self._buffered = 0  # samples in _chunks

    @property
    def in_speech(self) -> bool:
        return self._speech_from_ms is not None

    def push(self, data: bytes) -> list[InputEvent]:
        """One wire frame. Raises UndecodableAudio for a frame the input format cannot decode."""
        pcm = self._decoder.decode(data)
        if self._detector is None:
            self._buffer(pcm)
            return []
        return self._detected(self._detector.feed(pcm))

    def commit(self) -> list[InputEvent]:
        """The client ends the turn now. ProtocolError(bad_field) when there is no audio."""
        if self._detector is not None:
            stopped = self._detector.end_turn()
            if stopped is None:
                raise ProtocolError(
                    ErrorCode.BAD_FIELD,
                    "input.commit with no speech in progress: turn detection is on and every "
                    "finished turn was already answered (or send turn_detection type none)",
                )
            return self._detected([stopped])
        pcm = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        self.clear()
        if 1000 * len(pcm) < MIN_TURN_MS * VAD_RATE:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                f"input.commit with {1000 * len(pcm) // VAD_RATE} ms of audio: send at least "
                f"{MIN_TURN_MS} ms of the user's speech as audio frames first",
            )
        return [UserAudioTurn(pcm)]

    def clear(self) -> None:
        """Forget the audio of the turn in progress (manual buffer; VAD speech in progress)."""
        self._chunks.clear()
        self._buffered = 0
        if self._detector is not None and self._detector.end_turn() is not None:
            self._detector.take_turn()  # dropped: the client said to forget it
            self._speech_from_ms = None

    def _buffer(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self._buffered += len(pcm)
        limit = self._max_turn_ms * VAD_RATE // 1000
        while self._buffered - len(self._chunks[0]) >= limit and len(self._chunks) > 1:
            self._buffered -= len(self._chunks.popleft())

    def _detected(self, events: list[VadEvent]) -> list[InputEvent]:
        assert self._detector is not None
        out: list[InputEvent] = []
        for event in events:
            if isinstance(event, SpeechPaused):
                out.append(TurnPaused(UserAudioTurn(self._detector.peek_turn())))
                continue
            if isinstance(event, SpeechResumed):
                out.append(TurnResumed())
                continue
            out.append(event)
            if isinstance(event, SpeechStarted):
                self._speech_from_ms = event.audio_ms
            else:
                self._speech_from_ms = None
                turn = self._detector.take_turn()
                if turn is not None and len(turn):
                    out.append(UserAudioTurn(turn))
        if (
            self._speech_from_ms is not None
            and self._detector.position_ms - self._speech_from_ms > self._max_turn_ms
        ):
            stopped = self._detector.end_turn()
            if stopped is not None:
                out += self._detected([stopped])
        return out
