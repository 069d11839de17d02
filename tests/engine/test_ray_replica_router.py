"""A replica shared by several callers (engine/ray_replica.py, without Ray): each caller's
commands are applied in its own numbering, its tokens never collide with another's, it gets
the answers to its commands and the events of its own requests only, stats reach everyone,
and a caller that leaves has its requests cancelled."""

from __future__ import annotations

import queue
import time

import numpy as np

from engine.api import Cancel, ReportPlayback, SpeechRequest, Submit
from engine.engine_host import Answered, Refused, StepEvents
from engine.loop import Applied
from engine.outputs import (
    AudioChunk,
    EngineStats,
    Finished,
    FinishReason,
    StepTiming,
    WordTimings,
)
from engine.ray_replica import ReplicaHost
from engine.word_timing import WordTiming

STATS = EngineStats(0, 0, 10, 0, 0, StepTiming(), True)


def scripted_loop(applied: list, commands: queue.Queue, events: queue.Queue) -> None:
    """The engine loop's side of the queues, scripted: a Submit is admitted as its text (the
    request id) and speaks one chunk and its words, one step's events together as the host
    sends them (StepEvents); a Cancel ends the request; a ReportPlayback with a
    negative position is refused; every command is recorded in the order applied."""
    while (message := commands.get()) is not None:
        command, token = message
        applied.append(command)
        match command:
            case Submit(request):
                events.put(Answered(token, Applied(request.text)))
                chunk = AudioChunk(request.text, np.zeros(4, np.float32), 24_000)
                words = WordTimings(request.text, (WordTiming("hi", 0.0, 0.2),))
                events.put(StepEvents((chunk, words)))
            case Cancel(request_id):
                done = Finished(request_id, FinishReason.CANCELLED, 0)
                events.put(Answered(token, Applied(events=(done,))))
            case ReportPlayback(_, played_s) if played_s < 0:
                events.put(Refused(token, "input", "negative"))
        events.put(STATS)


class ScriptedReplica(ReplicaHost):
    def __init__(self) -> None:
        self.applied: list = []
        self._setup(scripted_loop, self.applied)


def drain(host: ReplicaHost, client: str, want: int) -> list:
    got: list = []
    deadline = time.monotonic() + 5
    while len([m for m in got if not isinstance(m, EngineStats)]) < want:
        assert time.monotonic() < deadline, got
        got += host.poll(client, 0.1)
    return [m for m in got if not isinstance(m, EngineStats)]


def test_each_caller_gets_its_own_answers_and_events_in_its_own_order():
    host = ScriptedReplica()
    # Caller a's commands arrive out of order (a threaded actor may run them so): applied in
    # a's numbering. Both callers use token 0: the replica keeps them apart.
    host.send("a", 1, ReportPlayback("ra", 1.0), None)
    host.send("b", 0, Submit(SpeechRequest(text="rb")), 0)
    host.send("a", 0, Submit(SpeechRequest(text="ra")), 0)
    a, b = drain(host, "a", 3), drain(host, "b", 3)
    # A step's events reach their owners one by one, word timings included.
    assert a[0] == Answered(0, Applied("ra")) and [type(m) for m in a[1:]] == [
        AudioChunk,
        WordTimings,
    ]
    assert b[0] == Answered(0, Applied("rb")) and {m.request_id for m in b[1:]} == {"rb"}
    assert {m.request_id for m in a[1:]} == {"ra"}
    order = [
        (type(c).__name__, c.request.text if isinstance(c, Submit) else c.request_id)
        for c in host.applied
    ]
    assert order.index(("Submit", "ra")) < order.index(("ReportPlayback", "ra"))
    # A refusal goes to its caller with its token; stats go to every caller that polls.
    host.send("b", 1, ReportPlayback("rb", -1.0), 7)
    assert drain(host, "b", 1) == [Refused(7, "input", "negative")]
    assert any(isinstance(m, EngineStats) for m in host.poll("a", 0.5))
    host.stop()


def test_a_caller_that_leaves_has_its_requests_cancelled_and_is_told_if_it_comes_back():
    host = ScriptedReplica()
    host.send("a", 0, Submit(SpeechRequest(text="ra")), 0)
    host.send("b", 0, Submit(SpeechRequest(text="rb")), 0)
    drain(host, "a", 2), drain(host, "b", 2)
    host.detach("a")
    deadline = time.monotonic() + 5
    while not any(isinstance(c, Cancel) for c in host.applied):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert [c.request_id for c in host.applied if isinstance(c, Cancel)] == ["ra"]
    (told,) = host.poll("a", 0.1)
    assert "detached" in told.reason
    host.send("b", 1, Cancel("rb"), 1)  # b is served as before
    (answer, finished) = drain(host, "b", 2)
    assert answer == Answered(1, Applied()) and finished.reason is FinishReason.CANCELLED
    host.stop()
