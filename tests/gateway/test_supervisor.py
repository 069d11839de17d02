"""Engine supervision (gateway/supervisor.py): the crash-loop bookkeeping on a fake clock, and
real engines (a thread, a process) killed and brought back."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.factory import build_engine
from engine.outputs import (
    AudioChunk,
    EngineStats,
    Finished,
    FinishReason,
    SpeechRequest,
    StepTiming,
)
from engine.request import SamplingParams
from gateway import supervisor as supervisor_module
from gateway.supervisor import CrashLoop, RestartPolicy, SupervisedEngine

FAST = RestartPolicy(backoff_s=0.05, max_backoff_s=0.2, max_failures=3, window_s=60, poll_s=0.02)
LONG = SpeechRequest("Hello there.", sampling=SamplingParams(max_tokens=3000, seed=1))


def test_backoff_doubles_within_the_window_and_a_crash_loop_gives_up():
    loop = CrashLoop(RestartPolicy(backoff_s=1, max_backoff_s=5, max_failures=4, window_s=100))
    loop.record(0)
    assert loop.backoff_s(0) == 1 and not loop.gave_up(0)
    loop.record(10)
    assert loop.backoff_s(10) == 2
    loop.record(20)
    assert loop.backoff_s(20) == 4
    # The first failure leaves the window: two recent ones, and the wait shrinks with them.
    assert loop.recent(105) == 2 and loop.backoff_s(105) == 2
    loop.record(106)
    loop.record(107)
    assert loop.recent(107) == 4 and loop.gave_up(107)
    assert loop.backoff_s(107) == 5  # capped at max_backoff_s
    assert not loop.gave_up(1000)  # failures far apart never add up to a crash loop


async def _until(predicate, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def _speaks(engine) -> None:
    request = SpeechRequest("Back again.", sampling=SamplingParams(max_tokens=40, seed=2))
    events = [e async for e in await engine.submit(request)]
    assert any(isinstance(e, AudioChunk) for e in events)
    assert events[-1].reason == FinishReason.LENGTH


def _tiny(**config):
    # Real-time admission off, as in the gateway's other engines (conftest.py): its calibration
    # bursts at each start (~1.5 s of CPU here) test nothing of the supervision.
    return build_engine(
        "tiny-orpheus",
        config=EngineConfig(num_kv_blocks=256, realtime_admission=False, **config),
    )


async def test_a_dead_thread_engine_is_replaced_and_serves_again():
    builds = []

    def factory():
        builds.append(_tiny(engine_process=False))
        return builds[-1]

    supervised = await SupervisedEngine.start(factory, FAST)
    try:
        stream = await supervised.submit(LONG)
        assert isinstance(await stream.get(), AudioChunk)

        def broken_step():
            raise RuntimeError("a bug in a model's code")

        builds[0].core.step = broken_step  # the loop's next step raises and the loop ends
        finished = [e async for e in stream][-1]
        assert isinstance(finished, Finished) and finished.reason == FinishReason.FAILED
        assert not supervised.ready
        await _until(lambda: supervised.ready)
        assert len(builds) == 2 and supervised.engine is builds[1]
        assert supervised.record.restarts == 1 and supervised.healthy
        assert "a bug in a model's code" in supervised.record.last_reason
        await _speaks(supervised)
        assert supervised.stats().kv_blocks_used == 0
    finally:
        await supervised.shutdown()


def _engine_processes() -> set[int]:
    """This process's spawned children (engine processes), found as an operator would."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, NotADirectoryError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


async def test_a_crash_loop_ends_in_unhealthy_and_no_more_attempts(monkeypatch, caplog):
    # The server process exits a grace after the supervisor gives up: here into `exits`.
    exits: list[int] = []
    exited_at: list[float] = []
    monkeypatch.setattr(supervisor_module, "GAVE_UP_EXIT_GRACE_S", 0.5)
    monkeypatch.setattr(
        supervisor_module,
        "_exit_process",
        lambda status: (exits.append(status), exited_at.append(time.monotonic())),
    )
    attempts = []

    def factory():
        attempts.append(time.monotonic())
        if len(attempts) > 1:
            raise RuntimeError("CUDA out of memory")
        return _tiny(engine_process=False)

    supervised = await SupervisedEngine.start(factory, FAST)
    gave_up_at: list[float] = []
    exit_after_grace = supervised.on_gave_up

    async def on_gave_up():  # when the supervisor itself gave up, not when the test saw it
        gave_up_at.append(time.monotonic())
        await exit_after_grace()

    supervised.on_gave_up = on_gave_up
    try:
        supervised.engine.core.step = lambda: 1 / 0
        await supervised.submit(SpeechRequest("Hi.", sampling=SamplingParams(max_tokens=20)))
        await _until(lambda: not supervised.healthy, timeout=30)
        assert not supervised.ready and supervised.record.restarts == 0
        assert "CUDA out of memory" in supervised.record.last_reason
        # The death and two failed rebuilds make three failures; then nothing more is tried.
        assert len(attempts) == 1 + FAST.max_failures - 1
        await asyncio.sleep(0.3)
        assert len(attempts) == FAST.max_failures
        # The death and the failed rebuilds are counted apart, each with its own reason.
        record = supervised.record
        assert (record.deaths, record.restart_failures) == (1, FAST.max_failures - 1)
        assert "division by zero" in record.last_death
        assert "CUDA out of memory" in record.last_restart_failure
        with pytest.raises(RuntimeError, match="not running"):
            await supervised.submit(SpeechRequest("Hi."))
        # /health failed meanwhile (healthy False); after the grace the process exits, non-zero.
        assert exits == []
        await _until(lambda: exits, timeout=10)
        # The grace is an asyncio sleep of 0.5 s from the give-up (a clock tick's slack).
        assert exits == [1] and exited_at[0] - gave_up_at[0] >= 0.49
        (line,) = [r.getMessage() for r in caplog.records if "exiting with status" in r.message]
        assert "exiting with status 1: the engine kept dying" in line
        assert "CUDA out of memory" in line
    finally:
        await supervised.shutdown()


async def test_a_killed_engine_process_and_its_replacement_killed_while_loading():
    """The engine process is killed with a stream in flight, then so is its replacement while
    it loads: the listener hears of the death at once, the death names the signal, the
    replacement's start fails at once and counts as a failed restart (its reason kept apart
    from the death's), and the next rebuild, in a process of its own, serves."""
    from gateway.metrics import SupervisorCollector

    builds = []
    replacement: list[int] = []

    def kill_when_spawned(known: set[int]) -> None:
        while not (new := _engine_processes() - known):
            time.sleep(0.01)
        time.sleep(0.3)  # loading
        replacement.append(new.pop())
        os.kill(replacement[0], signal.SIGKILL)

    def factory():
        builds.append(time.monotonic())
        if len(builds) == 2:
            known = _engine_processes()
            threading.Thread(target=kill_when_spawned, args=(known,), daemon=True).start()
        return _tiny(engine_process=True)

    before = _engine_processes()
    supervised = await SupervisedEngine.start(factory, FAST)
    try:
        first = supervised.engine
        (pid,) = _engine_processes() - before
        stream = await supervised.submit(LONG)
        assert isinstance(await stream.get(), AudioChunk)
        os.kill(pid, signal.SIGKILL)
        told = time.monotonic()
        finished = [e async for e in stream][-1]
        assert finished.reason == FinishReason.FAILED
        assert time.monotonic() - told < 1.0  # the listener hears of it at once
        await _until(lambda: supervised.record.restarts == 1, timeout=120)
        record = supervised.record
        assert len(builds) == 3 and supervised.ready and supervised.engine is not first
        # A new process serves: neither the killed one nor the replacement killed loading.
        assert len(_engine_processes() - before - {pid, *replacement}) == 1
        assert (record.deaths, record.restart_failures) == (1, 1)
        assert "killed by SIGKILL (signal 9" in record.last_death
        assert "restart failed" not in record.last_death
        assert "restart failed" in record.last_restart_failure
        assert "killed by SIGKILL" in record.last_restart_failure
        assert "while loading" in record.last_restart_failure
        samples = {s.name: s for f in SupervisorCollector(supervised).collect() for s in f.samples}
        assert samples["voxgate_engine_deaths_total"].value == 1
        assert samples["voxgate_engine_restart_failures_total"].value == 1
        assert samples["voxgate_engine_restarts_total"].value == 1
        assert "SIGKILL" in samples["voxgate_engine_last_death"].labels["reason"]
        await _speaks(supervised)
    finally:
        await supervised.shutdown()


class _FakeEngine:
    """Just what a supervisor and a replica pool read of an engine; `die()` kills it."""

    facts = None
    failure: str | None = None
    ready = True

    def die(self) -> None:
        self.failure, self.ready = "the engine process was killed by SIGKILL", False

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 100, 0, 0, StepTiming(), self.ready)

    async def shutdown(self) -> None:
        pass


async def test_a_replica_pool_exits_only_once_every_replica_has_given_up(monkeypatch, caplog):
    """One replica in a crash loop gives up alone and the others serve on; the server exits
    once none can recover (/health fails then)."""
    from gateway.config import GatewaySettings
    from gateway.replica_pool import ReplicaPool

    exits: list[int] = []
    monkeypatch.setattr(supervisor_module, "GAVE_UP_EXIT_GRACE_S", 0.2)
    monkeypatch.setattr(supervisor_module, "_exit_process", exits.append)

    def no_rebuild():
        raise RuntimeError("CUDA out of memory")

    engines = [_FakeEngine(), _FakeEngine()]
    replicas = [SupervisedEngine(no_rebuild, engine, FAST) for engine in engines]
    pool = ReplicaPool(replicas, ["replica-0", "replica-1"], GatewaySettings())
    pool.watch()
    try:
        engines[0].die()
        await _until(lambda: not replicas[0].healthy, timeout=10)
        await asyncio.sleep(0.5)  # past the grace
        assert pool.healthy and exits == []
        assert "SIGKILL" in replicas[0].record.last_death
        engines[1].die()
        await _until(lambda: not pool.healthy, timeout=10)
        await _until(lambda: exits, timeout=10)
        assert exits == [1]
        assert any("every engine replica kept dying" in r.message for r in caplog.records)
    finally:
        await pool.stop_watching()
