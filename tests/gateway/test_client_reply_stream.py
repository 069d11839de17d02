"""voxgate.client's ReplyStream yields one response's events, from its ResponseStarted to its
ResponseDone: what is left of an earlier response (cancelled and left unread) is skipped."""

from __future__ import annotations

from voxgate.client import Audio, ResponseDone, ResponseStarted, connect
from voxgate.client.events import SpeechStarted, Words
from voxgate.client.reply import ReplyStream


class QueuedEvents:
    """A session whose server has already sent `events`."""

    def __init__(self, events: list) -> None:
        self._events = iter(events)

    async def next_event(self, timeout: float | None = None):
        return next(self._events)


def audio(response_id: str | None) -> Audio:
    return Audio(response_id, b"frame", None, 0)


async def test_events_of_an_earlier_response_are_skipped():
    events = [
        audio("old"),
        ResponseDone("old", "cancelled", 100, 40),
        ResponseStarted("new"),
        audio("new"),
        Words("old", ()),  # a late one of the old response, naming it
        SpeechStarted(0),  # the session's: names no response
        ResponseDone("new", "completed", 20, 30),
    ]
    got = [e async for e in ReplyStream(QueuedEvents(events), None)]
    assert got == [events[2], events[3], events[5], events[6]]


async def test_next_speak_after_a_barge_in_yields_only_its_own_response(server):
    async with connect(server.url, sampling={"temperature": 0.0, "max_tokens": 200}) as session:
        frames = 0
        async for event in session.speak("A long answer that we will interrupt. " * 3):
            if isinstance(event, ResponseStarted):
                first = event.response_id
            if isinstance(event, Audio):
                frames += 1
                if frames == 5:
                    await session.cancel()
                    break  # the rest of this response is left unread
        seen = [e async for e in session.speak("Next one.")]
    assert isinstance(seen[0], ResponseStarted) and seen[0].response_id != first
    assert isinstance(seen[-1], ResponseDone) and seen[-1].response_id == seen[0].response_id
    assert all(getattr(e, "response_id", None) != first for e in seen), seen
    assert not any(isinstance(e, ResponseDone) for e in seen[:-1])
