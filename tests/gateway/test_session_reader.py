"""SessionReader's deadlines with one timer a session: messages keep a session alive past its
idle timeout, playing audio counts as activity, session.start brings the deadline nearer, an
interrupted receive loses nothing it was not given, and teardown's cancel stays a cancel."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from gateway.session_reader import SessionReader, Silence


class QueueSocket:
    """The part of a WebSocket the reader uses: messages put on a queue by the test."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    async def receive(self) -> dict:
        return await self.queue.get()


def reader_for(idle_s: float, start_s: float = 5.0) -> tuple[SessionReader, QueueSocket]:
    ws = QueueSocket()
    # The two timeouts the reader reads, shorter than GatewaySettings allows (≥ 1 s).
    settings = SimpleNamespace(idle_timeout_s=idle_s, start_timeout_s=start_s)
    return SessionReader(ws, wire=None, settings=settings), ws


def bytes_message(i: int) -> dict:
    return {"type": "websocket.receive", "bytes": bytes([i])}


async def test_messages_keep_the_session_alive_past_its_idle_timeout():
    reader, ws = reader_for(idle_s=0.3)
    started = lambda: False  # noqa: E731
    idle_since = lambda: reader.last_activity  # noqa: E731

    async def client() -> None:
        for i in range(8):  # 0.8 s of messages, each well inside the 0.3-s idle timeout
            await asyncio.sleep(0.1)
            ws.queue.put_nowait(bytes_message(i))

    sender = asyncio.create_task(client())
    got = [await reader.receive(started, idle_since) for _ in range(8)]
    assert [m["bytes"][0] for m in got] == list(range(8))
    t0 = time.monotonic()
    assert await reader.receive(started, idle_since) is Silence.IDLE
    assert 0.2 <= time.monotonic() - t0 <= 1.0  # the idle timeout after the last message
    await sender
    reader.close()


async def test_playing_audio_is_not_idling():
    reader, _ = reader_for(idle_s=0.2)
    playing_until = time.monotonic() + 0.6

    def idle_since() -> float:
        now = time.monotonic()
        return now if now < playing_until else playing_until

    t0 = time.monotonic()
    assert await reader.receive(lambda: False, idle_since) is Silence.IDLE
    # Not before the audio stopped playing, and then within about the idle timeout.
    assert 0.75 <= time.monotonic() - t0 <= 1.5
    reader.close()


async def test_the_start_deadline_then_the_nearer_idle_deadline():
    reader, ws = reader_for(idle_s=0.2, start_s=10.0)
    state = {"awaiting": True}
    awaiting = lambda: state["awaiting"]  # noqa: E731
    idle_since = lambda: reader.last_activity  # noqa: E731
    ws.queue.put_nowait({"type": "websocket.receive", "text": "{}"})  # its session.start
    assert (await reader.receive(awaiting, idle_since))["text"] == "{}"
    state["awaiting"] = False
    t0 = time.monotonic()
    assert await reader.receive(awaiting, idle_since) is Silence.IDLE
    assert time.monotonic() - t0 < 1.0  # not the 10-s start deadline the timer was set for
    reader.close()


async def test_no_session_start_in_time():
    reader, _ = reader_for(idle_s=5.0, start_s=0.2)
    t0 = time.monotonic()
    assert await reader.receive(lambda: True, lambda: reader.last_activity) is Silence.NOT_STARTED
    assert 0.15 <= time.monotonic() - t0 <= 1.0
    reader.close()


async def test_a_cancel_from_outside_stays_a_cancel():
    """Teardown cancels the reading task: that must end it, not be taken for a deadline."""
    reader, _ = reader_for(idle_s=0.2)
    task = asyncio.create_task(reader.receive(lambda: False, time.monotonic))  # always playing
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    reader.close()


async def test_close_leaves_no_timer_behind():
    reader, ws = reader_for(idle_s=0.2)
    ws.queue.put_nowait(bytes_message(1))
    await reader.receive(lambda: False, time.monotonic)
    assert reader._timer is not None
    reader.close()
    assert reader._timer is None
