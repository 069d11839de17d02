"""The server killed leaves no engine process behind: SIGTERM while it is still starting (before
it handles signals; the engine process is then still building its model) or SIGKILL while it
serves, and its engine process ends itself within seconds (engine/parent_watch.py). An orphaned
engine would keep the GPU's memory, and every later server on the machine would fail."""

from __future__ import annotations

import signal
import time

import pytest
from reliability_kit import ORPHEUS_ENGINE_PROCESS, ServeProcess

from tests.orphans import kill_left, spawned_children, wait_gone

GONE_WITHIN_S = 20.0  # generous: a loaded 2-core machine; the watcher itself takes milliseconds


def _engine_pid(server: ServeProcess, timeout_s: float = 120.0) -> int:
    """The engine's process, as soon as the server has started it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = spawned_children(server.proc.pid)
        if pids:
            assert len(pids) == 1, f"expected one engine process, found {pids}"
            return pids[0]
        assert server.alive, server.log_text()[-3000:]
        time.sleep(0.02)
    raise AssertionError(f"no engine process: {server.log_text()[-3000:]}")


@pytest.mark.parametrize(
    ("when", "sig"),
    [("starting", signal.SIGTERM), ("serving", signal.SIGKILL)],
    ids=["sigterm-starting", "sigkill-serving"],
)
def test_a_killed_server_leaves_no_engine_process(tmp_path, when, sig):
    server = ServeProcess(*ORPHEUS_ENGINE_PROCESS, log=tmp_path / "serve.log", listening=False)
    engine = None
    try:
        engine = _engine_pid(server)
        if when == "serving":
            server.wait_listening()
        else:  # past the hand-over of what to run: the engine process imports and builds
            time.sleep(0.5)
        server.proc.send_signal(sig)
        server.proc.wait(30)
        assert wait_gone(engine, GONE_WITHIN_S), (
            f"the engine process outlived the server: {server.log_text()[-3000:]}"
        )
        # Killed while starting, on a loaded machine the server may still not have handed the
        # new process what to run (it then ends on an EOFError, before any watcher).
        if when == "serving":
            line = "the server process is gone: the engine process exits"
            assert line in server.log_text(), server.log_text()[-3000:]
    finally:
        server.stop()
        if engine is not None:
            kill_left([engine])
