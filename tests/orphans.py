"""Whether a child process outlived its killed parent, read from /proc (Linux; psutil is not a
dependency): the tests of engine/parent_watch.py and of the server's child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): tells a reused pid apart."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def gone(pid: int, started: int | None = None) -> bool:
    """The process has exited. A zombie counts as gone: an orphan's exit is reaped by whatever
    adopted it, which in a container may be slow or never."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return True
    return started is not None and int(fields[19]) != started


def wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    """Poll until the process has exited; False if it still runs after `timeout_s`."""
    started = start_time(pid)
    deadline = time.monotonic() + timeout_s
    while not gone(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def spawned_children(pid: int) -> list[int]:
    """`pid`'s children started by multiprocessing's spawn (its command line runs spawn_main;
    the resource tracker's does not)."""
    found = []
    for child in children(pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
    return found


def kill_left(pids: list[int]) -> None:
    """SIGKILL those still running: a failing test leaves no orphan behind."""
    for pid in pids:
        if not gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
