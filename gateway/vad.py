"""Voice activity and end of turn on a session's input audio (webrtcvad), for turn-based
speech-to-speech sessions: `input.speech_started` / `input.speech_stopped` (docs/protocol.md), the
OpenAI Realtime server-VAD events, and the audio of each turn to hand to the model.

webrtcvad classifies 20 ms frames of 16 kHz 16-bit mono as voiced or not. A single frame is
too jumpy to act on, so: speech starts after `start_ms` of consecutive voiced frames (its start
is dated to the first of them), and stops once `silence_ms` of consecutive unvoiced frames
follow (its end is dated to the last voiced frame, as OpenAI's `audio_end_ms` is). A turn's
audio runs from `prefix_ms` before the speech started (the onset webrtcvad misses) to the
end of the silence that closed it. Frames quieter than `floor_dbfs` count as silence whatever
webrtcvad says: while its noise model adapts it flags even a quiet room as speech.

With `early_ms` (speculative replies, gateway/speculative_turn.py) a pause of that much silence
inside speech is told too (`SpeechPaused`, with `peek_turn()` the turn so far), and so is voice
coming back before the silence ended the turn (`SpeechResumed`): neither is a protocol event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway.protocol import SpeechStarted, SpeechStopped

VAD_RATE = 16000  # Hz: feed audio already resampled to this (gateway/audio_in.py does)
FRAME_MS = 20
FRAME = VAD_RATE * FRAME_MS // 1000  # samples per classified frame


@dataclass(frozen=True)
class SpeechPaused:
    """`early_ms` of silence inside speech (not a protocol event): the turn may have ended."""

    audio_ms: int  # the end of the speech before the pause, on the stream's clock


@dataclass(frozen=True)
class SpeechResumed:
    """Voice again after a SpeechPaused, before the silence ended the turn."""

    audio_ms: int


@dataclass(frozen=True)
class VadSettings:
    silence_ms: int = 500  # docs/protocol.md `turn_detection.silence_ms`
    aggressiveness: int = 2  # webrtcvad 0 (least) .. 3 (most eager to call audio non-speech)
    start_ms: int = 60
    prefix_ms: int = 300
    floor_dbfs: float = -45.0  # frames below this RMS level are silence
    early_ms: int = 0  # a pause this long is told (SpeechPaused); 0: never

    def __post_init__(self) -> None:
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError(f"aggressiveness must be 0..3, got {self.aggressiveness}")
        for name in ("silence_ms", "start_ms"):
            if getattr(self, name) < FRAME_MS:
                raise ValueError(f"{name} must be at least {FRAME_MS} ms")
        if self.early_ms < 0:
            raise ValueError(f"early_ms must be >= 0, got {self.early_ms}")


VadEvent = SpeechStarted | SpeechStopped | SpeechPaused | SpeechResumed


class TurnDetector:
    """Stateful per session: `feed` audio as it arrives, get speech events back; after a
    `SpeechStopped`, `take_turn()` returns that turn's audio (float32, 16 kHz)."""

    def __init__(self, settings: VadSettings = VadSettings()) -> None:
        import webrtcvad  # from the webrtcvad-wheels distribution

        self.settings = settings
        self._vad = webrtcvad.Vad(settings.aggressiveness)
        self._pending = np.zeros(0, np.float32)  # samples short of a whole frame
        self._frames = 0  # frames classified so far: the stream's clock
        # (frame index, samples) of recent frames: the prefix before speech, then the turn.
        self._history: list[tuple[int, np.ndarray]] = []
        self._voiced_run = 0
        self._silent_run = 0
        self._in_speech = False
        self._paused = False  # SpeechPaused told for the silence in progress
        self._finished_turn: np.ndarray | None = None

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    def feed(self, pcm: np.ndarray) -> list[VadEvent]:
        audio = np.concatenate([self._pending, np.asarray(pcm, np.float32)])
        whole = len(audio) // FRAME * FRAME
        self._pending = audio[whole:]
        events: list[VadEvent] = []
        for start in range(0, whole, FRAME):
            event = self._classify(audio[start : start + FRAME])
            if event is not None:
                events.append(event)
        return events

    def end_turn(self) -> SpeechStopped | None:
        """End the speech in progress now (a manual commit, or a turn grown too long): its
        audio so far becomes the turn. None when no speech is in progress."""
        if not self._in_speech:
            return None
        self._in_speech, self._voiced_run, self._paused = False, 0, False
        last_voiced = self._frames - 1 - self._silent_run
        self._finished_turn = np.concatenate([f for _, f in self._history])
        self._history = []
        return SpeechStopped(audio_ms=(last_voiced + 1) * FRAME_MS)

    @property
    def position_ms(self) -> int:
        """The stream's clock: audio classified so far."""
        return self._frames * FRAME_MS

    def take_turn(self) -> np.ndarray | None:
        """The audio of the last finished turn (once), or None."""
        turn, self._finished_turn = self._finished_turn, None
        return turn

    def peek_turn(self) -> np.ndarray:
        """The audio of the speech in progress so far (a copy), as take_turn would give it
        were the turn to end now."""
        return np.concatenate([f for _, f in self._history])

    def _is_voiced(self, frame: np.ndarray) -> bool:
        rms = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64)))) + 1e-12
        if 20 * np.log10(rms) < self.settings.floor_dbfs:
            return False
        pcm16 = (np.clip(frame, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        return self._vad.is_speech(pcm16, VAD_RATE)

    def _classify(self, frame: np.ndarray) -> VadEvent | None:
        voiced = self._is_voiced(frame)
        index = self._frames
        self._frames += 1
        self._history.append((index, frame))
        s = self.settings
        if not self._in_speech:
            self._voiced_run = self._voiced_run + 1 if voiced else 0
            keep = (s.prefix_ms + s.start_ms) // FRAME_MS + 1
            del self._history[:-keep]
            if self._voiced_run * FRAME_MS < s.start_ms:
                return None
            self._in_speech, self._silent_run = True, 0
            onset = index - self._voiced_run + 1
            first = onset - s.prefix_ms // FRAME_MS
            self._history = [(i, f) for i, f in self._history if i >= first]
            return SpeechStarted(audio_ms=onset * FRAME_MS)
        if voiced:
            self._silent_run = 0
            if self._paused:
                self._paused = False
                return SpeechResumed(audio_ms=index * FRAME_MS)
            return None
        self._silent_run += 1
        if self._silent_run * FRAME_MS < s.silence_ms:
            if s.early_ms and not self._paused and self._silent_run * FRAME_MS >= s.early_ms:
                self._paused = True
                return SpeechPaused(audio_ms=(index - self._silent_run + 1) * FRAME_MS)
            return None
        self._in_speech, self._voiced_run, self._paused = False, 0, False
        last_voiced = index - self._silent_run
        self._finished_turn = np.concatenate([f for _, f in self._history])
        self._history = []
        return SpeechStopped(audio_ms=(last_voiced + 1) * FRAME_MS)
