"""The conversation client: spoken turn-based conversations over `/v1/stream`, one session each,
through the Python client (voxgate.client).

A conversation opens its session at its planned time (`input_audio`, `output_audio`,
`sampling.min_tokens = max_tokens` for the reply length, `turn_detection`), then takes turns:

1. the user speaks: a clip's frames go out at the pace of a microphone, one every `frame_ms`
   on the real-time clock (a frame leaves when its audio has been captured). The end of the
   user's speech is when the clip's last frame left; the reply latency counts from there;
2. the turn ends: with turn detection `vad` the microphone goes on sending a quiet room and
   the server's VAD ends the turn (`input.speech_stopped`, `silence_ms` later); with `none`
   the client sends `input.commit` right after the last frame (push to talk);
3. the reply is heard from its first frame, as a player would play it (the frames' arrivals
   are recorded; voxbench/metrics.py judges them against their playback deadlines);
4. once the reply has played to its end (its last frame's playback, stalls included) and
   `think_s` more have passed, the next turn begins.

With `vad` the microphone never stops (the room between turns costs the server its decode and
VAD, as a real client's does); with `none` it sends only the turns. Opus is never decoded
(a frame holds `frame_ms`; a pcm16 frame's duration is its byte count).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from voxbench.metrics import underrun
from voxbench.turn_records import ConversationRecord, TurnRecord
from voxbench.turn_speech import MicTurn
from voxgate import client


@dataclass(frozen=True)
class ConversationOptions:
    url: str
    input_audio: dict[str, Any]
    output_audio: dict[str, Any]
    turns: tuple[MicTurn, ...]  # the clips, cycled over a conversation's turns
    room: tuple[bytes, ...]  # the microphone between turns (vad), cycled
    reply_s: float  # the reply asked for: min_tokens = max_tokens = `tokens`
    tokens: int
    vad_silence_ms: int | None = 200  # None: turn detection `none` and `input.commit`
    turns_each: int | None = 3  # turns a conversation takes; None: as many as fit `seconds`
    seconds: float | None = None  # no turn begins later than this after the session started
    think_s: float = 1.0  # between a reply's end and the next turn
    buffer_ms: float = 0.0  # the player's initial buffer b
    api_key: str | None = None
    connect_ahead_s: float = 0.5
    open_timeout_s: float = 30.0
    reply_timeout_s: float = 60.0  # after the end of speech, for the whole reply

    @property
    def frame_s(self) -> float:
        return self.input_audio.get("frame_ms", 20) / 1000

    @property
    def turn_detection(self) -> dict[str, Any]:
        if self.vad_silence_ms is None:
            return {"type": "none"}
        return {"type": "vad", "silence_ms": self.vad_silence_ms}


@dataclass(frozen=True)
class PlannedConversation:
    index: int
    offset_s: float  # when its session opens, from the start of the point
    first_clip: int  # the clip of its first turn (then the next ones, cycled)


def staggered_conversations(count: int, stagger_s: float) -> list[PlannedConversation]:
    """`count` conversations opening evenly over `stagger_s`, each starting on another clip."""
    if count < 1 or stagger_s < 0:
        raise ValueError("count must be >= 1 and stagger_s >= 0")
    return [PlannedConversation(i, i * stagger_s / count, i) for i in range(count)]


# --- the microphone ---------------------------------------------------------------------------
class Microphone:
    """One frame every `frame_s` on a fixed grid: a turn's frames while it is spoken, else the
    room (continuous) or nothing. `say` returns a future of (first, last) frame's send time;
    after the last one, `input.commit` when the client ends its turns itself."""

    def __init__(self, session: client.Session, opts: ConversationOptions) -> None:
        self._session, self._opts = session, opts
        self._speech: collections.deque[bytes] = collections.deque()
        self._spoken: asyncio.Future[tuple[float, float]] | None = None
        self._first: float | None = None

    def say(self, packets: tuple[bytes, ...]) -> asyncio.Future[tuple[float, float]]:
        self._speech.extend(packets)
        self._spoken = asyncio.get_running_loop().create_future()
        self._first = None
        return self._spoken

    async def run(self) -> None:
        opts, began, k = self._opts, time.monotonic(), 0
        continuous = opts.vad_silence_ms is not None
        try:
            while True:
                k += 1
                await _sleep_until(began + k * opts.frame_s)
                if self._speech:
                    sent = time.monotonic()
                    self._first = self._first or sent
                    await self._session.send_audio(self._speech.popleft())
                    if not self._speech and self._spoken is not None:
                        self._spoken.set_result((self._first, sent))
                        if not continuous:
                            await self._session.commit()
                elif continuous:
                    await self._session.send_audio(opts.room[k % len(opts.room)])
        except client.VoxgateError as exc:  # the session closed: the reader says why
            if self._spoken is not None and not self._spoken.done():
                self._spoken.set_exception(exc)


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


# --- one turn -----------------------------------------------------------------------------------
async def _turn(
    session: client.Session,
    mic: Microphone,
    opts: ConversationOptions,
    turn: TurnRecord,
    clip: MicTurn,
    start_at: float,
) -> float:
    """Speak `clip`, hear the reply to its `response.done`; returns when the reply's playback
    ends (monotonic). Failures are recorded on `turn` (and raise when the session broke)."""
    spoken = mic.say(clip.packets)
    frame_ms = bytes_per_ms = None
    spec = session.info.output_audio if session.info else {}
    if spec.get("format") == "pcm16":
        bytes_per_ms = spec["sample_rate"] * 2 / 1000
        turn.durations_ms = []
    else:
        frame_ms = float(spec.get("frame_ms", 20))
    turn.frame_ms = frame_ms
    arrivals: list[float] = []
    turn_end = started = None
    deadline = time.monotonic() + clip.speech_s + opts.reply_timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            turn.exception = "reply_timeout"
            break
        try:
            event = await session.next_event(timeout=remaining)
        except TimeoutError:
            turn.exception = "reply_timeout"
            break
        if isinstance(event, client.Audio):
            arrivals.append(event.received_at)
            if bytes_per_ms is not None:
                turn.durations_ms.append(len(event.data) / bytes_per_ms)
        elif isinstance(event, client.SpeechStarted):
            turn.speech_events += 1
        elif isinstance(event, client.SpeechStopped):
            turn_end = turn_end or event.received_at
        elif isinstance(event, client.ResponseStarted):
            started = event.received_at
        elif isinstance(event, client.ResponseDone):
            turn.done = {"status": event.status, "audio_ms": event.audio_ms}
            turn.done["ttfa_ms"] = event.ttfa_ms
            break
        elif isinstance(event, client.Error):
            turn.errors.append({"code": event.code, "message": event.message[:200]})
            turn.errors[-1]["fatal"] = event.fatal
            if started is None and not event.fatal:
                break  # the turn was not taken (no speech tokens, too many queued …): no reply
    first, end = await asyncio.wait_for(asyncio.shield(spoken), clip.speech_s + 5.0)
    turn.speech_began_s = first - start_at
    turn.sent_s = end - start_at
    turn.arrivals_ms = [(t - end) * 1000 for t in arrivals]
    if opts.vad_silence_ms is None:
        turn_end = end  # input.commit went right after the last frame
    turn.turn_end_ms = None if turn_end is None else (turn_end - end) * 1000
    turn.reply_started_ms = None if started is None else (started - end) * 1000
    if not arrivals:
        return time.monotonic()
    stalled, _ = underrun(turn.arrivals_ms, turn.frame_durations_ms(), opts.buffer_ms)
    played_ms = turn.arrivals_ms[0] + opts.buffer_ms + turn.received_audio_ms + stalled
    return end + played_ms / 1000


# --- one conversation -----------------------------------------------------------------------------
async def _conversation(
    plan: PlannedConversation, rec: ConversationRecord, opts: ConversationOptions, start_at: float
) -> None:
    await _sleep_until(start_at + plan.offset_s - opts.connect_ahead_s)
    rec.connect_s = time.monotonic() - start_at
    try:
        session = await client.connect(
            opts.url,
            api_key=opts.api_key,
            input_audio=opts.input_audio,
            output_audio=opts.output_audio,
            sampling={"min_tokens": opts.tokens, "max_tokens": opts.tokens},
            turn_detection=opts.turn_detection,
            decode_audio=False,
            open_timeout=opts.open_timeout_s,
            max_queue=1024,
        )
    except client.CapacityError as exc:
        rec.refused, rec.close_code = True, getattr(exc, "close_code", None)
        return
    except (client.VoxgateError, OSError, TimeoutError) as exc:
        rec.exception = f"{type(exc).__name__}: {exc}"[:200]
        return
    rec.started_s = time.monotonic() - start_at
    mic = Microphone(session, opts)
    mic_task = asyncio.create_task(mic.run())
    try:
        await _turns(plan, rec, opts, session, mic, start_at)
    except client.VoxgateError as exc:
        rec.exception = f"{type(exc).__name__}: {exc}"[:200]
        rec.close_code = session.close_code
    finally:
        mic_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await mic_task
        with contextlib.suppress(client.VoxgateError, TimeoutError, OSError):
            await session.end(timeout=5.0)
        rec.ended_s = time.monotonic() - start_at


async def _turns(plan, rec, opts, session, mic, start_at) -> None:
    # The first turn at the planned time (the session opened `connect_ahead_s` before it).
    began = next_turn = max(time.monotonic() + opts.frame_s, start_at + plan.offset_s)
    k = 0
    while opts.turns_each is None or k < opts.turns_each:
        if opts.seconds is not None and next_turn - began > opts.seconds:
            break
        clip = opts.turns[(plan.first_clip + k) % len(opts.turns)]
        turn = TurnRecord(k, clip.name, opts.reply_s, opts.tokens, next_turn - start_at)
        turn.speech_s = round(clip.speech_s, 3)
        rec.turns.append(turn)
        await _sleep_until(next_turn)
        played = await _turn(session, mic, opts, turn, clip, start_at)
        if not turn.ok:
            break
        next_turn = max(played, time.monotonic()) + opts.think_s
        k += 1
    if opts.turns_each is None:
        rec.turns_planned = max(1, len(rec.turns))


async def play_conversations(
    plan: list[PlannedConversation], opts: ConversationOptions, start_at: float
) -> list[ConversationRecord]:
    """One process's share of a point (LoadGenerator.play): every conversation of `plan`."""
    planned = opts.turns_each if opts.turns_each is not None else 1
    records = [ConversationRecord(p.index, round(p.offset_s, 4), planned) for p in plan]
    await asyncio.gather(
        *(_conversation(p, r, opts, start_at) for p, r in zip(plan, records, strict=True))
    )
    return records
