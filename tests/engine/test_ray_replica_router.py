"""A replica shared by several callers (engine/ray_replica.py, without Ray): each caller's
batches of commands are applied in its own numbering, each batch's in its order, its tokens
never collide with another's, it gets the answers to its commands and the events of its own
requests only (audio without the engine host's clock), stats reach everyone, a caller that leaves has its requests cancelled, and an
engine that dies without a word is told to every caller."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest

from engine.api import Cancel, PushAudio, ReportPlayback, SpeechRequest, Submit
from engine.engine_host import Answered, CommandBatch, Crashed, Ready, Refused, StepEvents
from engine.loop import Applied
from engine.outputs import (
    AudioChunk,
    EngineStats,
    Finished,
    FinishReason,
    StepTiming,
    WordTimings,
)
from engine.ray_replica import ENGINE_CHECK_S, ReplicaHost
from engine.word_timing import WordTiming

STATS = EngineStats(0, 0, 10, 0, 0, StepTiming(), True)


def scripted_loop(applied: list, sizes: list, commands: queue.Queue, events: queue.Queue) -> None:
    """The engine loop's side of the queues, scripted: a Submit is admitted as its text (the
    request id) and speaks one chunk and its words, one step's events together as the host
    sends them (StepEvents); a Cancel ends the request; a ReportPlayback with a
    negative position is refused; every command is recorded in the order applied, and the
    size of every batch the loop got."""
    while (message := commands.get()) is not None:
        sizes.append(len(message.commands))
        for command, token in message.commands:
            applied.append(command)
            answer(command, token, events)
        events.put(STATS)


def answer(command, token: int | None, events: queue.Queue) -> None:
    match command:
        case Submit(request):
            events.put(Answered(token, Applied(request.text)))
            chunk = AudioChunk(request.text, np.zeros(4, np.float32), 24_000, time.monotonic())
            words = WordTimings(request.text, (WordTiming("hi", 0.0, 0.2),))
            events.put(StepEvents((chunk, words)))
        case Cancel(request_id):
            done = Finished(request_id, FinishReason.CANCELLED, 0)
            events.put(Answered(token, Applied(events=(done,))))
        case ReportPlayback(_, played_s) if played_s < 0:
            events.put(Refused(token, "input", "negative"))


class ScriptedReplica(ReplicaHost):
    def __init__(self) -> None:
        self.applied: list = []
        self.sizes: list = []  # of the batches the loop got
        self._setup(scripted_loop, self.applied, self.sizes)


def one(command, token: int | None) -> CommandBatch:
    return CommandBatch(((command, token),))


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
    host.send("a", 1, one(ReportPlayback("ra", 1.0), None))
    host.send("b", 0, one(Submit(SpeechRequest(text="rb")), 0))
    host.send("a", 0, one(Submit(SpeechRequest(text="ra")), 0))
    a, b = drain(host, "a", 3), drain(host, "b", 3)
    # A step's events reach their owners one by one, word timings included.
    assert a[0] == Answered(0, Applied("ra")) and [type(m) for m in a[1:]] == [
        AudioChunk,
        WordTimings,
    ]
    # The engine's clock stays on its host: a caller elsewhere could not read it.
    assert a[1].made_s is None and len(a[1].pcm) == 4
    assert b[0] == Answered(0, Applied("rb")) and {m.request_id for m in b[1:]} == {"rb"}
    assert {m.request_id for m in a[1:]} == {"ra"}
    order = [
        (type(c).__name__, c.request.text if isinstance(c, Submit) else c.request_id)
        for c in host.applied
    ]
    assert order.index(("Submit", "ra")) < order.index(("ReportPlayback", "ra"))
    # A refusal goes to its caller with its token; stats go to every caller that polls.
    host.send("b", 1, one(ReportPlayback("rb", -1.0), 7))
    assert drain(host, "b", 1) == [Refused(7, "input", "negative")]
    assert any(isinstance(m, EngineStats) for m in host.poll("a", 0.5))
    host.stop()


def test_a_caller_that_leaves_has_its_requests_cancelled_and_is_told_if_it_comes_back():
    host = ScriptedReplica()
    host.send("a", 0, one(Submit(SpeechRequest(text="ra")), 0))
    host.send("b", 0, one(Submit(SpeechRequest(text="rb")), 0))
    drain(host, "a", 2), drain(host, "b", 2)
    host.detach("a")
    deadline = time.monotonic() + 5
    while not any(isinstance(c, Cancel) for c in host.applied):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert [c.request_id for c in host.applied if isinstance(c, Cancel)] == ["ra"]
    (told,) = host.poll("a", 0.1)
    assert "detached" in told.reason
    host.send("b", 1, one(Cancel("rb"), 1))  # b is served as before
    (answer, finished) = drain(host, "b", 2)
    assert answer == Answered(1, Applied()) and finished.reason is FinishReason.CANCELLED
    host.stop()


def test_a_batch_is_applied_whole_in_its_order_and_each_command_answered_by_its_token():
    host = ScriptedReplica()
    pcm = np.zeros(1920, np.float32)
    # The caller's second batch arrives first: it waits for the first, then both go to the
    # loop as they were, one message each, the commands in the caller's order.
    later = CommandBatch(((PushAudio("ra", pcm), None), (ReportPlayback("rb", -1.0), 5)))
    host.send("a", 1, later)
    first = CommandBatch(
        (
            (Submit(SpeechRequest(text="ra")), 3),
            (PushAudio("ra", pcm), None),
            (Submit(SpeechRequest(text="rb")), 4),
            (Cancel("ra"), None),
        )
    )
    host.send("a", 0, first)
    got = drain(host, "a", 8)  # 3 answers, 2 chunks and 2 words, the Finished of ra
    answers = [m for m in got if isinstance(m, Answered | Refused)]
    assert answers == [
        Answered(3, Applied("ra")),
        Answered(4, Applied("rb")),
        Refused(5, "input", "negative"),
    ]
    applied = [
        (type(c).__name__, c.request.text if isinstance(c, Submit) else c.request_id)
        for c in host.applied
    ]
    assert applied == [
        ("Submit", "ra"),
        ("PushAudio", "ra"),
        ("Submit", "rb"),
        ("Cancel", "ra"),
        ("PushAudio", "ra"),
        ("ReportPlayback", "rb"),
    ]
    assert host.sizes == [4, 2]
    host.stop()


class DyingReplica(ReplicaHost):
    """A replica whose engine loop ends without a word (as a killed engine process does):
    after its Ready at the first command when `ready`, else at once."""

    def __init__(self, ready: bool) -> None:
        self._setup(self._loop, ready)

    @staticmethod
    def _loop(ready: bool, commands: queue.Queue, events: queue.Queue) -> None:
        if ready:
            events.put(Ready(None, STATS))
            commands.get()


def test_an_engine_gone_without_a_word_is_told_to_every_caller_once():
    host = DyingReplica(ready=True)
    assert host.start(5).stats == STATS
    host.poll("b", 0.01)  # b polls, a sends: both are callers
    host.send("a", 0, one(ReportPlayback("ra", 1.0), None))
    told = {client: drain(host, client, 1) for client in ("a", "b")}
    for (crashed,) in told.values():
        assert isinstance(crashed, Crashed) and "engine process exited" in crashed.reason
    time.sleep(2 * ENGINE_CHECK_S)
    assert drain(host, "a", 0) == []  # once


def test_an_engine_gone_before_it_was_ready_fails_the_start():
    host = DyingReplica(ready=False)
    with pytest.raises(RuntimeError, match="engine process exited"):
        host.start(5)


@pytest.mark.parametrize("callers", [1, 4])
def test_a_send_is_not_held_up_by_every_caller_waiting_in_poll(callers):
    """A threaded Ray actor runs its calls on a fixed number of threads, and every caller
    always has a poll waiting on one: with one thread a caller, a send (microphone frames)
    waited until some poll gave up. `replica_concurrency` leaves threads to spare. The actor's
    threads are stood in for by a pool of the same size running the replica's real calls."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.ray_replica import replica_concurrency

    quiet = ScriptedReplica()  # nothing is submitted: every poll waits its whole time

    def caller(actor: ThreadPoolExecutor, client: str, until: float) -> None:
        while time.monotonic() < until:  # a gateway's reader: the next poll once one returns
            actor.submit(quiet.poll, client, 0.4).result()

    for seq, (threads, held_up) in enumerate(
        ((callers, True), (replica_concurrency(callers), False))
    ):
        with ThreadPoolExecutor(threads) as actor, ThreadPoolExecutor(callers) as gateways:
            until = time.monotonic() + 1.2
            for i in range(callers):
                gateways.submit(caller, actor, f"gateway-{i}", until)
            time.sleep(0.05)  # every caller's poll is waiting now
            sent = time.monotonic()
            play = one(ReportPlayback("r", 1.0), None)
            actor.submit(quiet.send, "gateway-0", seq, play).result()
            waited = time.monotonic() - sent
        assert (waited > 0.25) is held_up, (threads, waited)
    deadline = time.monotonic() + 5
    while len(quiet.applied) < 2:  # both sends reach the engine loop
        assert time.monotonic() < deadline, quiet.applied
        time.sleep(0.01)
    quiet.stop()
