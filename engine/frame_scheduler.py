"""Frame-synchronous scheduling of full-duplex sessions (no torch).

Full-duplex models (Moshi) consume one frame of the user's audio and emit one frame of their
own every frame period (80 ms for Mimi). All live sessions step together, once per frame, on
one tick grid: tick k is due at `t0 + k · frame_s`. A session's audio clock starts at its first
live tick, and output frame n of a session is on time when its step finishes by the end of its
tick's period (`due + frame_s`): the listener plays frame n-1 meanwhile.

Input timing is the client's clock, not ours, so every tick each session's input queue is
handled deliberately, never by waiting:

- **late** (queue empty at the tick): the session steps on a frame of **silence** (counted in
  `input_late`); its real frame, when it arrives, stays queued, so one late packet grows the
  session's input buffer by one frame — an adaptive jitter buffer that absorbs the next one.
- **early** (more than `max_input_frames` queued: a burst after a network stall, or a client
  whose clock runs fast): the **oldest frames are dropped** down to the bound (counted in
  `input_dropped`), so the model never lags the user by more than that many frames.
- **engine behind** (the tick runs more than `max_catch_up_frames` periods late): the grid
  **resyncs** to now — missed ticks are not replayed, every session's clock shifts by the
  same amount (counted in `resyncs`), instead of racing through a backlog.

A session joins between frames: it is primed (its initial row runs in the next tick's batch)
once its first input frame is queued, and goes live on the tick after, consuming that frame.
The one tick it waits is a first frame of jitter margin. It leaves between frames too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class DuplexPhase(enum.IntEnum):
    WAITING = 0  # joined, no input frame yet
    PRIMING = 1  # its initial row runs in the next tick
    LIVE = 2  # one input frame in, one output frame out, every tick


@dataclass
class FrameSessionStats:
    frames_out: int = 0
    on_time: int = 0
    late: int = 0
    max_late_s: float = 0.0
    input_late: int = 0  # ticks stepped on silence
    input_dropped: int = 0  # frames dropped to stay within max_input_frames


@dataclass
class _Session:
    phase: DuplexPhase = DuplexPhase.WAITING
    queued: int = 0  # complete input frames waiting
    stats: FrameSessionStats = field(default_factory=FrameSessionStats)


@dataclass(frozen=True)
class LiveStep:
    session_id: str
    use_input: bool  # False: step on silence (input late)
    drop_before: int = 0  # oldest queued frames to discard first (input early)


@dataclass
class FramePlan:
    tick: int
    due: float
    priming: list[str] = field(default_factory=list)
    live: list[LiveStep] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.priming) + len(self.live)


class FrameScheduler:
    def __init__(
        self, frame_s: float, max_input_frames: int = 3, max_catch_up_frames: int = 2
    ) -> None:
        if frame_s <= 0 or max_input_frames < 1 or max_catch_up_frames < 0:
            raise ValueError("frame_s > 0, max_input_frames >= 1, max_catch_up_frames >= 0")
        self.frame_s = frame_s
        self.max_input_frames = max_input_frames
        self.max_catch_up_frames = max_catch_up_frames
        self.sessions: dict[str, _Session] = {}
        self._t0: float | None = None  # the grid's origin; set by the first session
        self._tick = 0
        self.resyncs = 0
        self.totals = FrameSessionStats()  # over all sessions, past and present

    # --- membership ------------------------------------------------------------------------------
    def join(self, session_id: str) -> None:
        if session_id in self.sessions:
            raise ValueError(f"session {session_id!r} already joined")
        self.sessions[session_id] = _Session()

    def leave(self, session_id: str) -> FrameSessionStats | None:
        session = self.sessions.pop(session_id, None)
        if not self.sessions:
            self._t0 = None  # an idle engine restarts its grid with the next session
        return None if session is None else session.stats

    def push_frames(self, session_id: str, frames: int) -> None:
        """`frames` more complete input frames are queued for the session."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.queued += frames

    def stats(self, session_id: str) -> FrameSessionStats | None:
        session = self.sessions.get(session_id)
        return None if session is None else session.stats

    # --- the clock -------------------------------------------------------------------------------
    def next_due(self) -> float | None:
        """When the next tick is due; None when no session is ready to step."""
        if not any(self._ready(s) for s in self.sessions.values()):
            return None
        return self._t0 + self._tick * self.frame_s if self._t0 is not None else float("-inf")

    @staticmethod
    def _ready(session: _Session) -> bool:
        return session.phase != DuplexPhase.WAITING or session.queued > 0

    def plan(self, now: float) -> FramePlan | None:
        """The tick to run now, or None when it is not due yet (or nobody is ready)."""
        due = self.next_due()
        if due is None or now < due:
            return None
        if self._t0 is None:
            self._t0, self._tick, due = now, 0, now
        elif now - due > self.max_catch_up_frames * self.frame_s:
            self._t0 += now - due  # resync: every session's clock shifts alike
            self.resyncs += 1
            due = now
        plan = FramePlan(self._tick, due)
        for session_id, s in self.sessions.items():
            if s.phase == DuplexPhase.LIVE:
                drop = max(0, s.queued - self.max_input_frames)
                s.queued -= drop
                use = s.queued > 0
                s.queued -= int(use)
                s.stats.input_dropped += drop
                self.totals.input_dropped += drop
                s.stats.input_late += int(not use)
                self.totals.input_late += int(not use)
                plan.live.append(LiveStep(session_id, use, drop))
            elif s.phase == DuplexPhase.PRIMING or s.queued > 0:
                s.phase = DuplexPhase.PRIMING
                plan.priming.append(session_id)
        self._tick += 1
        return plan

    def finish(self, plan: FramePlan, done: float) -> None:
        """The tick's step is over at `done`: account each live frame, promote the primed."""
        late_by = done - (plan.due + self.frame_s)
        for step in plan.live:
            s = self.sessions.get(step.session_id)
            if s is None:
                continue
            for stats in (s.stats, self.totals):
                stats.frames_out += 1
                if late_by <= 0:
                    stats.on_time += 1
                else:
                    stats.late += 1
                    stats.max_late_s = max(stats.max_late_s, late_by)
        for session_id in plan.priming:
            s = self.sessions.get(session_id)
            if s is not None:
                s.phase = DuplexPhase.LIVE
