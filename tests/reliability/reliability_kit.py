"""The reliability suite's kit: a real `voxgate serve` process on loopback, its /metrics and
memory read from outside, and the suite's sizes.

The sizes are small by default, so the suite runs inside `make test` on two CPU cores; the
full sizes (the figures docs/gateway.md promises) run with

    VOXGATE_RELIABILITY_FULL=1 pytest tests/reliability

and the soak with `VOXGATE_SOAK_S=1800 pytest tests/reliability/test_soak.py`.

The crash and stop tests serve tiny-orpheus on the CPU; `VOXGATE_RELIABILITY_SERVE` gives them
another server's arguments instead, and `VOXGATE_RELIABILITY_KILL_SESSIONS` the native sessions
mid-response at an engine kill, e.g. on a GPU machine (docs/gateway.md):

    VOXGATE_RELIABILITY_SERVE="--model orpheus-3b --random-weights --engine-process \
        --no-realtime-admission" \
    VOXGATE_RELIABILITY_KILL_SESSIONS=96 pytest tests/reliability/test_engine_crash.py -k mid_stream
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.orphans import spawned_children

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("VOXGATE_RELIABILITY_FULL") == "1"


@dataclass(frozen=True)
class Sizes:
    sessions: int  # concurrent sessions against a fast model
    disconnects: int  # abrupt disconnects mid-generation
    fuzz_frames: int  # fuzzed frames on /v1/stream (a quarter of it on each other endpoint)
    fuzz_sessions: int  # sessions the fuzzed frames are spread over
    kills: int  # engine kills survived in a row
    # Native sessions mid-response at each kill.
    killed_mid_stream: int = int(os.environ.get("VOXGATE_RELIABILITY_KILL_SESSIONS", "3"))


SIZES = (
    Sizes(sessions=1000, disconnects=500, fuzz_frames=100_000, fuzz_sessions=200, kills=3)
    if FULL
    else Sizes(sessions=48, disconnects=24, fuzz_frames=2_000, fuzz_sessions=8, kills=1)
)

_LISTENING = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")


# tiny-orpheus (random weights: never stops before max_tokens) with the engine in its own
# process, which the crash and kill tests end. Real-time admission is off: on a shared CI core
# even one tiny-orpheus stream is slower than real time, and these tests need several streams
# mid-response at once.
ORPHEUS_ENGINE_PROCESS = tuple(
    shlex.split(
        os.environ.get(
            "VOXGATE_RELIABILITY_SERVE",
            "--model tiny-orpheus --engine-process --no-realtime-admission --kv-cache-mb 64",
        )
    )
)


class ServeProcess:
    """`python -m gateway.cli serve …` as an operator runs it, on an ephemeral port. Started, it
    waits until the server listens; with `listening=False` it returns at once (`port` None)."""

    def __init__(
        self, *args: str, log: Path, timeout_s: float = 240.0, listening: bool = True
    ) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 - open for the server's whole life
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        self.port: int | None = None
        if listening:
            self.wait_listening(timeout_s)

    def wait_listening(self, timeout_s: float = 240.0) -> None:
        try:
            self.port = self._wait_listening(timeout_s)
        except BaseException:
            self.stop()  # a server that never listened is not left running
            raise
        self.http = f"http://127.0.0.1:{self.port}"
        self.ws = f"ws://127.0.0.1:{self.port}"

    def _wait_listening(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log_path.read_text())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError("the server did not start listening in time")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        """The server process's resident memory (the engine's process not included)."""
        return _rss_mb(self.proc.pid)

    def engine_pids(self) -> list[int]:
        """The engine's process (a spawned child of the server)."""
        return spawned_children(self.proc.pid)

    def kill_engine(self) -> int:
        pids = self.engine_pids()
        assert len(pids) == 1, f"expected one engine process, found {pids}"
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def metrics(server: ServeProcess) -> dict[str, float]:
    """/metrics as {sample name with labels: value}."""
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
        text = (await client.get("/metrics")).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def refusals_by_cause(values: dict[str, float], family: str) -> dict[str, float]:
    """A refusal family's counts by cause from `metrics()` (family: e.g.
    voxgate_engine_admission_refusals_total, voxgate_gateway_admission_refusals_total)."""
    prefix = family + "{cause="
    return {
        name[len(prefix) : -1].strip('"'): value
        for name, value in values.items()
        if name.startswith(prefix)
    }


def refusals_between(
    before: dict[str, float], after: dict[str, float], family: str
) -> dict[str, float]:
    """A refusal family's counts added between two `metrics()` readings, by cause."""
    old, new = refusals_by_cause(before, family), refusals_by_cause(after, family)
    return {cause: n - old.get(cause, 0) for cause, n in new.items() if n > old.get(cause, 0)}


async def probe(server: ServeProcess, path: str) -> int:
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
        return (await client.get(path)).status_code


async def until(predicate, timeout_s: float, what: str, every_s: float = 0.05):
    """Poll an async predicate until it returns a truthy value; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await _sleep(every_s)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def engine_idle(server: ServeProcess, timeout_s: float = 30.0) -> dict[str, float]:
    """Until the engine holds no request and no KV page; the metrics then."""

    async def idle():
        m = await metrics(server)
        busy = (
            m.get("voxgate_engine_kv_blocks_used", 1)
            + m.get("voxgate_engine_running_requests", 1)
            + m.get("voxgate_engine_waiting_requests", 1)
        )
        return m if busy == 0 else None

    return await until(idle, timeout_s, "the engine to go idle")
