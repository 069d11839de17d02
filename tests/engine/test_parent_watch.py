"""engine/parent_watch.py: a child that watches its parent ends itself, with one WARNING line,
when the parent is SIGKILLed (no exit handler runs there), while its main thread is busy in one
long call; through multiprocessing's parent sentinel, and by polling os.getppid() in a process
multiprocessing did not start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.orphans import gone, kill_left, wait_gone

ROOT = Path(__file__).resolve().parents[2]

# argv[1]: "spawn" starts a multiprocessing child (spawn, daemon, as the server's are), "plain"
# a subprocess; either child watches this process and sleeps in its main thread.
SCRIPT = """
import logging, multiprocessing, os, subprocess, sys, time

from engine.parent_watch import exit_with_parent


def child():
    logging.basicConfig(format="%(levelname)s %(message)s")
    exit_with_parent("the test child", logging.getLogger("test"))
    print("child", os.getpid(), flush=True)
    time.sleep(600)  # the main thread in one long call, as while building a model


if __name__ == "__main__":
    if sys.argv[1] == "spawn":
        multiprocessing.get_context("spawn").Process(target=child, daemon=True).start()
    elif sys.argv[1] == "plain":
        subprocess.Popen([sys.executable, __file__, "child"])
    else:
        child()
    time.sleep(600)
"""


def _child_pid(log: Path, parent: subprocess.Popen, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        assert parent.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"the child did not start: {log.read_text()}")


@pytest.mark.parametrize("started_by", ["spawn", "plain"])
def test_a_watching_child_ends_when_its_parent_is_killed(tmp_path, started_by):
    script = tmp_path / "watched.py"
    script.write_text(SCRIPT)
    log = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as out:
        parent = subprocess.Popen(
            [sys.executable, str(script), started_by], stdout=out, stderr=out, env=env, cwd=ROOT
        )
    child = None
    try:
        child = _child_pid(log, parent)
        time.sleep(0.6)  # longer than the getppid poll: a live parent is never taken for dead
        assert not gone(child), log.read_text()
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(child, 20.0), f"the child outlived its parent: {log.read_text()}"
        assert "WARNING the server process is gone: the test child exits" in log.read_text()
    finally:
        parent.kill()
        parent.wait(10)
        if child is not None:
            kill_left([child])
