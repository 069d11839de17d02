"""The engine loop in a process of its own (`EngineClient`, engine/api.py).

Why: in a thread, the engine shares the GIL with the gateway's event loop and the codec
thread, and every blocking torch call can cost it a whole switch interval
(`bench/gil_probe.py`). A child process has its own interpreter. Commands (engine/api.py's
values, with the token of the caller awaiting the answer) go down one multiprocessing queue,
those of one turn of the gateway's event loop as one `CommandBatch` (engine/engine_host.py),
and are applied there between steps (engine/loop.py:apply); engine events (audio as numpy
arrays), answers and stats snapshots come back on another, read by one thread here
(engine/client_base.py hands them out). The loop itself is engine/engine_host.py's,
as a Ray replica runs it (engine/ray_replica.py: in a child process of its actor, through
`engine_process_main` as here). Turn preparation (the speech tokenizer ...) and the encoding of
clients' voice clips run in the child on a thread of their own, beside the loop, as the
thread client runs them beside its.

The child ends itself when the server process is gone, however it died (engine/parent_watch.py):
a killed server must not leave an orphaned engine holding the GPU's memory.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import queue
import signal
import threading
import time

from engine.engine_host import (
    CommandBatch,
    EngineSpec,
    HostedClient,
    Ready,
    host_main,
    log_to_stderr,
)
from engine.parent_watch import exit_with_parent

__all__ = ["EngineSpec", "ProcessEngine", "describe_exit"]

# While the child loads, start() looks this often whether it is still alive: one that dies
# (killed, out of memory) fails the start at once instead of after the whole deadline.
START_POLL_S = 0.2
# What a child that has just exited may still have sent (its StartFailed): read before its
# exit code is taken as the reason.
LAST_WORDS_S = 0.5


def describe_exit(exitcode: int | None) -> str:
    """How an engine process ended, for a log line or a metric label: its exit status, or the
    signal that killed it (SIGKILL is what the kernel's OOM killer sends)."""
    if exitcode is None:
        return "stopped answering"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    number = -exitcode
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"was killed by signal {number}"
    if number == signal.SIGKILL:
        return f"was killed by {name} (signal {number}; the kernel's OOM killer sends it)"
    return f"was killed by {name} (signal {number})"


class ProcessEngine(HostedClient):
    def __init__(self, spec: EngineSpec, start_timeout_s: float | None = None) -> None:
        super().__init__()
        self.spec = spec
        # How long loading and warming up the model may take (--engine-start-timeout).
        self.start_timeout_s = (
            spec.config.engine_start_timeout_s if start_timeout_s is None else start_timeout_s
        )
        ctx = mp.get_context("spawn")  # CUDA cannot be forked
        self._commands = ctx.Queue()
        self._events = ctx.Queue()
        self._process = ctx.Process(
            target=engine_process_main,
            # A spawned interpreter logs nothing below WARNING unless told: the parent's level.
            args=(spec, self._commands, self._events, logging.getLogger().getEffectiveLevel()),
            name="voxgate-engine",
            daemon=True,
        )
        self._reader: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child and wait until its engine is built and warmed up. Raises
        RuntimeError at once if the child dies meanwhile, naming its exit status or signal."""
        self._process.start()
        message = self._await_start()
        if not isinstance(message, Ready):
            self._process.join(5)
            raise RuntimeError(f"the engine process failed to start: {message.reason}")
        self.facts, self._stats = message.facts, message.stats
        self._reader = threading.Thread(
            target=self._read, name="voxgate-engine-events", daemon=True
        )
        self._reader.start()

    def _await_start(self) -> object:
        """The child's first message (Ready or StartFailed), waited for in short slices so that
        a child that died while loading is noticed at once."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                return self._events.get(timeout=START_POLL_S)
            except queue.Empty:
                pass
            if not self._process.is_alive():
                try:
                    return self._events.get(timeout=LAST_WORDS_S)  # its StartFailed, if any
                except queue.Empty:
                    raise RuntimeError(
                        f"the engine process {describe_exit(self._process.exitcode)} while "
                        "loading the model; its log lines above say why, if it wrote any"
                    ) from None
            if time.monotonic() > deadline:
                self._process.kill()
                raise RuntimeError(
                    f"the engine process did not load and warm up the model within "
                    f"{self.start_timeout_s:g} s: raise --engine-start-timeout if a first "
                    "download or compile takes longer"
                )

    async def shutdown(self) -> None:
        if self._process.is_alive():
            self._flush()  # commands of this turn before the stop
            self._commands.put(None)
            await asyncio.to_thread(self._process.join, 10.0)
        if self._process.is_alive():
            self._process.kill()
        self._fail_all("the engine was shut down")

    @property
    def ready(self) -> bool:
        return self.facts is not None and self._process.is_alive() and self.failure is None

    def _send_batch(self, batch: CommandBatch) -> None:
        self._commands.put(batch)

    # --- the reader thread -------------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                message = self._events.get(timeout=0.5)
            except queue.Empty:
                if not self._process.is_alive():
                    exited = f"the engine process {describe_exit(self._process.exitcode)}"
                    self.failure = self.failure or exited
                    self._fail_all(self.failure)
                    return
                continue
            except (EOFError, OSError):
                return
            self._handle(message)


def engine_process_main(spec: EngineSpec, commands, events, log_level: int) -> None:
    """The engine process: watch its parent first (the server, or a Ray replica's actor:
    building the model can take minutes, and a parent killed meanwhile must not leave it
    behind), then host the engine."""
    log_to_stderr(log_level)  # the watcher's line too, if it comes before host_main's
    exit_with_parent("the engine process", logging.getLogger("voxgate.engine"))
    host_main(spec, commands, events, log_level)
