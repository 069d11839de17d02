"""A child process of the server ends itself when the server process is gone.

`daemon=True` on a multiprocessing child only helps when the parent's interpreter exits
normally: a parent killed by a signal (SIGKILL at any time, or SIGTERM during a slow start-up,
before its handlers are in place) runs no exit handler, and the child lives on as an orphan
holding what it built (an engine's whole GPU memory), so every later server on the machine
fails. So a child calls `exit_with_parent` first thing: a daemon thread waits on the parent's
liveness and ends the process with `os._exit` once the parent is gone. A thread, because the
main thread may be inside one long torch call (building the model) for minutes; `os._exit`,
because `sys.exit` ends only the thread that calls it, and the main thread would not even see
an interrupt before its C call returns.

The wait is on `multiprocessing.parent_process().sentinel`: the child's end of the pipe its
parent launched it through. The parent holds the other end for as long as the child runs, so
it becomes readable when the parent process is gone, however it died (no polling; spawn and
fork alike, any platform). A process not started by multiprocessing polls `os.getppid()`
instead: it changes when the parent dies and the child is handed to another process. Not
prctl's PR_SET_PDEATHSIG: it fires when the *thread* that created the child exits, and the
server's supervisor rebuilds engines from worker threads that come and go.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
import time

POLL_S = 0.5  # the getppid fallback's period


def exit_with_parent(name: str, log: logging.Logger) -> threading.Thread:
    """Start this process's watcher thread. `name` says which process, in the one WARNING line
    it logs on `log` before ending the process (e.g. "the engine process")."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        sentinel = parent.sentinel

        def wait() -> None:
            multiprocessing.connection.wait([sentinel])
    else:
        ppid = os.getppid()

        def wait() -> None:
            while os.getppid() == ppid:
                time.sleep(POLL_S)

    def watch() -> None:
        wait()
        log.warning("the server process is gone: %s exits", name)
        os._exit(1)

    thread = threading.Thread(target=watch, name="voxgate-parent-watch", daemon=True)
    thread.start()
    return thread
