"""The transcriber's threads (gateway/input_transcription.py): turns transcribe in parallel on
its workers, a bounded number wait, and one more gets no transcript at once rather than one
that comes ever later."""

import asyncio
import dataclasses
import threading

import pytest

from gateway.input_transcription import TranscriberBusy, TranscriptionPool, default_workers


def test_a_quarter_of_the_cores_one_to_four_workers():
    assert [default_workers(c) for c in (1, 2, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 4]


async def test_turns_run_on_every_worker_and_the_backlog_is_bounded():
    pool = TranscriptionPool(workers=2, backlog=1)
    release = threading.Event()
    started: list[str] = []

    def work(name: str):
        def run() -> str:
            started.append(name)
            assert release.wait(10)
            return name.upper()

        return run

    try:
        tasks = [asyncio.create_task(pool.run(work(n))) for n in ("a", "b", "c")]
        for _ in range(200):  # both workers take a turn; the third waits for one
            if len(started) == 2:
                break
            await asyncio.sleep(0.01)
        assert sorted(started) == ["a", "b"]
        with pytest.raises(TranscriberBusy, match="3 turns ahead"):
            await pool.run(work("d"))
        release.set()
        assert await asyncio.gather(*tasks) == ["A", "B", "C"]
        assert await pool.run(work("e")) == "E"  # room again
    finally:
        release.set()
        pool.close()


def test_a_sessions_transcripts_are_sent_in_the_order_of_its_turns():
    """Turns transcribe in parallel, and a later one may finish first; the native event names
    no turn, so a session's transcripts go out in the order of its turns (a failed one in its
    place too)."""
    import logging

    import numpy as np

    from gateway.config import GatewaySettings
    from gateway.input_transcription import InputTranscription
    from gateway.metrics import GatewayMetrics
    from gateway.protocol import InputTranscript
    from gateway.reply import Emitter
    from gateway.turn_input import UserAudioTurn
    from gateway.turns import TurnConversation

    class Transcriber:  # each turn's words come when its event is set
        def __init__(self) -> None:
            self.done = {name: asyncio.Event() for name in ("t1", "t2", "t3")}

        async def transcribe(self, pcm, asked) -> str:
            name = f"t{int(pcm[0])}"
            await self.done[name].wait()
            if name == "t2":
                raise TranscriberBusy("busy")
            return f"words of {name}"

    async def run() -> None:
        events: list = []
        transcriber = Transcriber()
        talk = TurnConversation(
            None,
            "conv",
            GatewaySettings(),
            Emitter(event=events.append, audio=lambda frame, ms: None),
            GatewayMetrics(lambda: None),
            open_encoder=None,
            log=logging.getLogger("test"),
            transcriber=transcriber,
        )
        talk.options = dataclasses.replace(talk.options, input_transcription=InputTranscription())
        for i in (1, 2, 3):
            talk._transcribe(UserAudioTurn(np.full(160, float(i), np.float32), f"turn_{i}"))
        for name in ("t3", "t2", "t1"):  # the last turn's words come first
            transcriber.done[name].set()
            await asyncio.sleep(0.01)
        for _ in range(100):
            if len(events) == 3:
                break
            await asyncio.sleep(0.01)
        assert events == [
            InputTranscript("words of t1", turn_id="turn_1"),
            InputTranscript(error="busy", turn_id="turn_2"),
            InputTranscript("words of t3", turn_id="turn_3"),
        ]

    asyncio.run(run())
