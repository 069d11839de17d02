"""The transcriber's threads (gateway/input_transcription.py): turns transcribe in parallel on
its workers, a bounded number wait, and one more gets no transcript at once rather than one
that comes ever later."""

import asyncio
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
