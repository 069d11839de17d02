"""Pacing and backpressure: when a frame may leave, and how much may wait for the socket.

Two stages stand between the engine and the client:

1. `PlaybackClock` releases a response's frames no faster than real time plus a fixed lead
   (the client's jitter buffer). The engine usually runs faster than real time; the audio it is
   ahead by waits upstream of the clock, where `response.cancel` can still drop it.
2. `SendQueue` holds what the clock released (and every JSON event) until the socket takes it.
   A client that reads keeps it near empty. One that stops reading stalls the socket, the
   queue fills at real-time speed, and past its bound `put` raises `SendQueueFull`: the session
   then closes with 1008 instead of buffering without end.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from gateway.socket_items import OutAudio, OutItem, OutText

# Once a response's lead is full, its frames are released in groups this long, not one by
# one. Why: frame by frame, a gateway streaming 100 responses wakes 5,000 times a second to send
# each 20-ms frame on its own timer, and each wake also wakes that session's writer task.
# Grouping five frames cuts those wakes five-fold, and the client's buffer stays within 100 ms
# of the lead.
RELEASE_S = 0.1


class PlaybackClock:
    """The client's playback position, assumed to start when the first frame is sent.

    A frame may be sent once `sent_s - played_s <= lead_s`. If a frame is only ready after the
    client has played everything sent before it, the client ran dry (an underrun): playback
    restarts from the late frame, so the clock moves its origin forward by the gap.
    """

    def __init__(
        self,
        lead_s: float,
        clock: Callable[[], float] = time.monotonic,
        release_s: float = RELEASE_S,
    ) -> None:
        self.lead_s = lead_s
        # At most half the lead, so the client always keeps half of it in hand (lead 0: frame
        # by frame, in real time).
        self.release_s = min(release_s, lead_s / 2)
        self.sent_s = 0.0
        self.underruns = 0
        self._clock = clock
        self._origin: float | None = None  # wall time at which playback position 0 plays

    @property
    def started(self) -> bool:
        return self._origin is not None

    def position(self) -> float:
        """Seconds of the response the client has played by now, as far as the server can
        tell: time since the first frame, never more than was sent."""
        if self._origin is None:
            return 0.0
        return max(0.0, min(self.sent_s, self._clock() - self._origin))

    def runs_dry_at(self) -> float:
        """When the client will have played every frame sent so far, on this clock: when the
        next frame is needed. Before the first frame, now (a listener waits for first audio)."""
        now = self._clock()
        if self._origin is None:
            return now
        return max(now, self._origin + self.sent_s)

    def delay(self) -> float:
        """Seconds to wait before the next frame may be sent."""
        if self._origin is None:
            return 0.0
        return max(0.0, self._origin + self.sent_s - self.lead_s - self._clock())

    def mark_sent(self, duration_s: float) -> bool:
        """Account for one frame handed to the socket. Returns True when it came late."""
        now = self._clock()
        late = False
        if self._origin is None:
            self._origin = now
        elif now > self._origin + self.sent_s:
            late = True
            self.underruns += 1
            self._origin = now - self.sent_s
        self.sent_s += duration_s
        return late

    def wait_s(self) -> float:
        """How long to sleep before sending the next frame: nothing while the lead has room;
        once it is full, until `release_s` more of it has played, so that the frames then go
        out together and the client's buffer moves between lead - release_s and the lead."""
        delay = self.delay()
        return delay + self.release_s if delay > 0 else 0.0

    async def wait(self) -> None:
        pause = self.wait_s()
        if pause > 0:
            await asyncio.sleep(pause)


class SendQueueFull(Exception):
    """The client is not taking what it is sent; the item was not queued."""


class SendQueue:
    """FIFO between the session and its writer task, bounded in audio time and event count."""

    def __init__(self, max_audio_ms: int, max_events: int) -> None:
        self.max_audio_ms = max_audio_ms
        self.max_events = max_events
        self._items: collections.deque[OutItem] = collections.deque()
        self._ready = asyncio.Event()
        self.audio_ms = 0
        self.events = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: OutItem) -> None:
        """Queue `item`, or raise SendQueueFull when the bound would be passed."""
        if isinstance(item, OutAudio) and self.audio_ms + item.duration_ms > self.max_audio_ms:
            raise SendQueueFull(f"{self.audio_ms} ms of audio not taken by the client")
        if isinstance(item, OutText) and self.events >= self.max_events:
            raise SendQueueFull(f"{self.events} events not taken by the client")
        self.put_final(item)

    def put_final(self, item: OutItem) -> None:
        """Queue without the bound: the last events of a closing session."""
        self._items.append(item)
        if isinstance(item, OutAudio):
            self.audio_ms += item.duration_ms
        elif isinstance(item, OutText):
            self.events += 1
        self._ready.set()

    async def get(self) -> OutItem:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        if isinstance(item, OutAudio):
            self.audio_ms -= item.duration_ms
        elif isinstance(item, OutText):
            self.events -= 1
        return item

    def clear(self) -> None:
        self._items.clear()
        self.audio_ms = 0
        self.events = 0
