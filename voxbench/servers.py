"""The systems under test as child processes: `voxgate serve` and the HF baseline server, each
on a free local port, started one at a time (one GPU) and stopped before the next."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("voxgate.bench")
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ServerProcess:
    name: str
    command: list[str]
    url: str  # ws://127.0.0.1:PORT/v1/stream
    http: str  # http://127.0.0.1:PORT
    log_path: Path
    process: subprocess.Popen
    startup_s: float = 0.0
    _log_file: IO | None = None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve_command(
    model: str, random_weights: bool, policy: str, device: str | None, port: int, extra: list[str]
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "gateway.cli",
        "--log-level",
        "WARNING",
        "serve",
        "--model",
        model,
        "--policy",
        policy,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if random_weights:
        cmd.append("--random-weights")
    if device:
        cmd += ["--device", device]
    return cmd + list(extra)


def baseline_command(model: str, random_weights: bool, device: str | None, port: int) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "voxbench.baseline_server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if random_weights:
        cmd.append("--random-weights")
    if device:
        cmd += ["--device", device]
    return cmd


def http_base(ws_url: str) -> str:
    """ws://host:port/v1/stream → http://host:port (wss → https)."""
    parts = urllib.parse.urlsplit(ws_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return f"{scheme}://{parts.netloc}"


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def ready_info(http: str) -> dict | None:
    """/ready's JSON when the server is ready, else None."""
    with contextlib.suppress(OSError, ValueError):
        status, body = http_get(f"{http}/ready", timeout=2.0)
        if status == 200:
            return json.loads(body)
    return None


# The servers this process started and has not stopped: a SIGTERM to the bench stops them
# (stop_started_servers) before it exits.
_STARTED: list[ServerProcess] = []


def start_server(
    name: str, command: list[str], port: int, log_path: Path, timeout_s: float
) -> ServerProcess:
    """Start `command`, wait until GET /ready answers 200; its output goes to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = log_path.open("w")
    log.info("starting %s: %s", name, " ".join(command))
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the terminal's ^C reaches the bench, which stops us in order
    )
    http = f"http://127.0.0.1:{port}"
    server = ServerProcess(
        name,
        command,
        f"ws://127.0.0.1:{port}/v1/stream",
        http,
        log_path,
        process,
        _log_file=log_file,
    )
    _STARTED.append(server)
    while ready_info(http) is None:
        if process.poll() is not None or time.monotonic() - started > timeout_s:
            stop_server(server)
            why = (
                f"exited with {process.returncode}"
                if process.returncode is not None
                else f"not ready after {timeout_s:.0f} s"
            )
            raise RuntimeError(f"{name} {why}; the end of {log_path}:\n{_tail(log_path)}")
        time.sleep(0.5)
    server.startup_s = round(time.monotonic() - started, 1)
    log.info("%s ready after %.1f s", name, server.startup_s)
    return server


def stop_server(server: ServerProcess, timeout_s: float = 30.0) -> None:
    """SIGINT (uvicorn's graceful shutdown, which stops the engine), then SIGTERM, then SIGKILL."""
    process = server.process
    for sig, wait_s in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait_s)
    if server._log_file is not None:
        server._log_file.close()
        server._log_file = None
    if server in _STARTED:
        _STARTED.remove(server)


def stop_started_servers() -> None:
    """Stop every server this process started and has not stopped, newest first."""
    for server in reversed(list(_STARTED)):
        stop_server(server)


def wait_idle(http: str, timeout_s: float = 30.0) -> bool:
    """Until /metrics shows no open session and no engine request (the last point's sessions
    are closed and their engine work freed). False on timeout or without /metrics."""
    deadline = time.monotonic() + timeout_s
    keys = (
        "voxgate_sessions",
        "voxgate_engine_running_requests",
        "voxgate_engine_waiting_requests",
    )
    while time.monotonic() < deadline:
        try:
            status, body = http_get(f"{http}/metrics")
        except OSError:
            return False
        if status != 200:
            return False
        values = gauges(body, keys)
        if values and all(v == 0 for v in values.values()):
            return True
        time.sleep(0.2)
    return False


# Pauses counted by length: over one 20-ms frame (a first chunk's cover starts at a few
# frames), and over 100 ms.
PAUSE_THRESHOLDS = {"over_20ms": "0.02", "over_100ms": "0.1"}
_HISTOGRAMS = {  # what server_pauses reads: /metrics histogram, the series' label filter, and
    # what the bench's log calls it
    "loop_lag": ("voxgate_event_loop_lag_seconds", "", "event-loop lag samples"),
    "full_gc": ("voxgate_gc_pause_seconds", 'generation="2"', "full GCs"),
    "encode_queue": ("voxgate_encode_queue_seconds", "", "encodes queued"),
    "encode_run": ("voxgate_encode_run_seconds", "", "encodes run"),
    "encode_hurried": ("voxgate_encode_hurried_seconds", "", "encodes hurried (their waits)"),
    "audio_delivery": ("voxgate_audio_delivery_seconds", "", "chunks from engine to socket"),
}


def gauges(body: str, names: tuple[str, ...]) -> dict[str, float]:
    """The unlabelled series `names` in a /metrics text, by name (those it has)."""
    found: dict[str, float] = {}
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            found[name] = float(value)
    return found


def metrics_body(http: str) -> str | None:
    """The server's /metrics text now; None when it does not answer."""
    try:
        status, body = http_get(f"{http}/metrics")
    except OSError:
        return None
    return body if status == 200 else None


def server_pauses(http: str) -> dict[str, dict[str, float]] | None:
    """From the server's /metrics, so far: its full (generation-2) garbage collections, its
    event loop's lag samples, its output encodes' time queued and running, the waits of
    those that ran hurried (gateway.audio HURRIED_COMPLEXITY), and its chunks' delivery from
    the engine to the socket, each as how many, how many over each of PAUSE_THRESHOLDS, and
    their total milliseconds. None when the server does not answer."""
    body = metrics_body(http)
    return None if body is None else parse_server_pauses(body)


def parse_server_pauses(body: str) -> dict[str, dict[str, float]]:
    """server_pauses from a /metrics body; a histogram the server lacks is left out."""
    found: dict[str, dict[str, float]] = {}
    for key, (metric, labels, _) in _HISTOGRAMS.items():
        values: dict[str, float] = {}
        for line in body.splitlines():
            if not line.startswith(metric + "_") or labels not in line:
                continue
            name, _, value = line.rpartition(" ")
            kind = name[len(metric) + 1 :].partition("{")[0]
            if kind == "count":
                values["count"] = float(value)
            elif kind == "sum":
                values["ms"] = 1000 * float(value)
            elif kind == "bucket":
                for over, bound in PAUSE_THRESHOLDS.items():
                    if f'le="{bound}"' in name:
                        values[over] = float(value)
        if len(values) == 2 + len(PAUSE_THRESHOLDS):
            count = values["count"]
            found[key] = {
                "count": count,
                **{over: count - values[over] for over in PAUSE_THRESHOLDS},
                "ms": values["ms"],
            }
    return found


def pauses_between(before: dict | None, after: dict | None) -> dict[str, dict[str, float]] | None:
    """What server_pauses counted between two readings (one rate point)."""
    if before is None or after is None:
        return None
    return {
        key: {k: round(v - before[key][k], 1) for k, v in now.items()}
        for key, now in after.items()
        if key in before
    }


def describe_pauses(pauses: dict[str, dict[str, float]] | None) -> list[str]:
    """server_pauses (or pauses_between) as log lines, one a histogram."""
    return [
        f"server {what}: {p['count']:.0f}, {p['over_20ms']:.0f} over 20 ms, "
        f"{p['over_100ms']:.0f} over 100 ms, {p['ms']:.0f} ms in all"
        for key, (_, _, what) in _HISTOGRAMS.items()
        if pauses and (p := pauses.get(key)) is not None
    ]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
