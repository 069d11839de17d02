"""The commands a gateway issues during one turn of its event loop reach a hosted engine (its own
process, or a Ray replica) as one `CommandBatch`, in the order issued (engine/engine_host.py:
HostedClient): a full-duplex session pushes audio every 80 ms, and a message per command cost
the engine's loop a pickle, a pipe read and the GIL about 1,600 times a second at 128 sessions.
Each command is still answered with its own token; a command issued off the loop goes at once,
after those gathered before it."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
from types import SimpleNamespace

import numpy as np

from engine.api import Cancel, EndSession, Submit
from engine.config import EngineConfig
from engine.engine_host import Answered, CommandBatch, EngineSpec, HostedClient
from engine.loop import Applied
from engine.outputs import SpeechRequest
from engine.process_engine import ProcessEngine

PCM = np.zeros(1920, np.float32)  # 80 ms at 24 kHz


class Recorded(HostedClient):
    """A hosted client whose transport records the batches it is given."""

    ready = True

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[CommandBatch] = []

    def _send_batch(self, batch: CommandBatch) -> None:
        self.sent.append(batch)


def request_of(command) -> str:
    return command.request.request_id if isinstance(command, Submit) else command.request_id


def kinds(batch: CommandBatch) -> list[tuple[str, str, int | None]]:
    return [(type(c).__name__, request_of(c), token) for c, token in batch.commands]


async def test_one_turns_commands_go_as_one_batch_in_the_order_issued():
    client = Recorded()
    submit = asyncio.create_task(client.submit(SpeechRequest("hi", request_id="r1")))
    await asyncio.sleep(0)  # the submit's task sends it; this turn goes on below
    client.cancel("r1")
    client.push_audio("r1", PCM)
    assert client.sent == []  # nothing before the turn ends
    await asyncio.sleep(0)
    (batch,) = client.sent
    assert kinds(batch) == [("Submit", "r1", 0), ("Cancel", "r1", None), ("PushAudio", "r1", None)]
    # The answer to the submit, with its token, admits its stream.
    client._handle(Answered(0, Applied("r1")))
    stream = await asyncio.wait_for(submit, 5)
    assert stream.request_id == "r1"


async def test_many_pushes_in_one_turn_are_one_message_and_the_next_turn_another():
    client = Recorded()
    for i in range(128):
        client.push_audio(f"r{i}", PCM)
    await asyncio.sleep(0)
    client.end_session("r0")
    await asyncio.sleep(0)
    assert [len(b.commands) for b in client.sent] == [128, 1]
    assert [c.request_id for c, _ in client.sent[0].commands] == [f"r{i}" for i in range(128)]
    assert isinstance(client.sent[1].commands[0][0], EndSession)


async def test_two_asks_in_one_turn_are_answered_by_their_own_tokens():
    client = Recorded()
    first = asyncio.create_task(client.submit(SpeechRequest("a", request_id="a")))
    second = asyncio.create_task(client.submit(SpeechRequest("b", request_id="b")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    (batch,) = client.sent
    tokens = {c.request.request_id: token for c, token in batch.commands}
    client._handle(Answered(tokens["b"], Applied("b")))  # answered out of order
    client._handle(Answered(tokens["a"], Applied("a")))
    assert (await first).request_id == "a" and (await second).request_id == "b"


async def test_a_command_from_another_thread_goes_at_once_after_those_gathered():
    client = Recorded()
    client.push_audio("r1", PCM)  # gathered for this turn's end
    thread = threading.Thread(target=client.cancel, args=("r1",))  # as the reader thread does
    thread.start()
    thread.join()
    (batch,) = client.sent  # sent by the thread itself, the audio first
    assert kinds(batch) == [("PushAudio", "r1", None), ("Cancel", "r1", None)]
    await asyncio.sleep(0)
    assert len(client.sent) == 1  # the turn's end finds nothing left
    client.push_audio("r1", PCM)  # and the next turn gathers again
    await asyncio.sleep(0)
    assert kinds(client.sent[1]) == [("PushAudio", "r1", None)]


def test_with_no_event_loop_running_each_command_goes_at_once():
    client = Recorded()
    client.push_audio("r1", PCM)
    client.report_playback("r1", 0.5)
    assert [kinds(b) for b in client.sent] == [
        [("PushAudio", "r1", None)],
        [("ReportPlayback", "r1", None)],
    ]


async def test_a_ray_engine_makes_one_numbered_call_per_turn():
    from engine.ray_engine import RayEngine

    calls = []
    actor = SimpleNamespace(send=SimpleNamespace(remote=lambda *args: calls.append(args)))
    engine = RayEngine(actor, "replica-0")
    for _ in range(50):
        engine.push_audio("r1", PCM)
    await asyncio.sleep(0)
    engine.cancel("r1")
    await asyncio.sleep(0)
    assert [(client, seq, len(batch.commands)) for client, seq, batch in calls] == [
        (engine.client_id, 0, 50),
        (engine.client_id, 1, 1),
    ]
    assert isinstance(calls[1][2].commands[0][0], Cancel)


# --- through the engine process's own queues, a scripted host in place of the engine ----------
def scripted_host(commands, events, report) -> None:
    """Answers each Submit with its request id; at the stop, reports on `report` the messages it
    got (the number of commands in each, and the commands in the order applied)."""
    sizes, applied = [], []
    while (message := commands.get()) is not None:
        sizes.append(len(message.commands))
        for command, token in message.commands:
            applied.append((type(command).__name__, request_of(command)))
            if isinstance(command, Submit):
                events.put(Answered(token, Applied(command.request.request_id)))
    report.put((sizes, applied))


async def test_the_engine_process_gets_a_turns_commands_as_one_message():
    engine = ProcessEngine(EngineSpec("scripted", None, EngineConfig()))
    ctx = mp.get_context("spawn")
    report = ctx.Queue()
    engine._process = ctx.Process(
        target=scripted_host, args=(engine._commands, engine._events, report), daemon=True
    )
    engine._process.start()
    engine.facts = SimpleNamespace()  # ready: no Ready message from a scripted host
    reader = threading.Thread(target=engine._read, daemon=True)
    reader.start()
    try:
        submit = asyncio.create_task(engine.submit(SpeechRequest("hi", request_id="s")))
        await asyncio.sleep(0)
        for _ in range(200):
            engine.push_audio("s", PCM)
        engine.report_playback("s", 0.1)
        stream = await asyncio.wait_for(submit, 30)
        assert stream.request_id == "s"  # answered across the process, by its token
        engine.cancel("s")  # the last command before the stop: shutdown sends it first
    finally:
        await engine.shutdown()
    sizes, applied = report.get(timeout=10)
    assert sizes == [202, 1]
    assert applied == [
        ("Submit", "s"),
        *[("PushAudio", "s")] * 200,
        ("ReportPlayback", "s"),
        ("Cancel", "s"),
    ]
