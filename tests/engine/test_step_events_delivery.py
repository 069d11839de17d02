"""A step's events reach their streams in order with one wake-up of the consumers' event loop
(ResponseStream.push_all, ClientBase._deliver_all): a full-duplex frame has one or two events
per session, and a wake-up each kept the gateway's loop busy at a hundred sessions."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from engine.api import ResponseStream
from engine.client_base import ClientBase
from engine.outputs import AudioChunk, Finished, FinishReason, TextDelta


class Counted(ClientBase):
    def _send(self, command, token) -> None:  # no transport: streams are registered below
        raise AssertionError("not used")


def test_a_steps_events_arrive_in_order_with_one_wake_up():
    async def main():
        loop = asyncio.get_running_loop()
        client = Counted()
        streams = {}
        for rid in ("a", "b", "c"):
            streams[rid] = ResponseStream(loop, rid)
            client._streams[rid] = streams[rid]
        wakeups = []
        real = loop.call_soon_threadsafe

        def counting(callback, *args):
            wakeups.append(callback)
            return real(callback, *args)

        loop.call_soon_threadsafe = counting
        chunk = np.zeros(4, np.float32)
        step = [
            AudioChunk("a", chunk, 24_000),
            TextDelta("a", "hi"),
            AudioChunk("b", chunk, 24_000),
            Finished("b", FinishReason.STOP, 3),
            TextDelta("gone", "x"),  # a request nobody listens to any more: dropped
            AudioChunk("c", chunk, 24_000),
        ]
        thread = threading.Thread(target=client._deliver_all, args=(step,))
        thread.start()
        thread.join()
        got = {rid: [] for rid in streams}
        for rid, want in (("a", 2), ("b", 2), ("c", 1)):
            for _ in range(want):
                got[rid].append(await asyncio.wait_for(streams[rid].get(), 5))
        return wakeups, got, client

    wakeups, got, client = asyncio.run(main())
    assert len(wakeups) == 1
    assert [type(e).__name__ for e in got["a"]] == ["AudioChunk", "TextDelta"]
    assert [type(e).__name__ for e in got["b"]] == ["AudioChunk", "Finished"]
    assert "b" not in client._streams and "a" in client._streams  # a finished stream leaves
