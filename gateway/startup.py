"""`voxgate serve` from settings to a listening server, where a bad configuration ends with one
line saying what to do instead of a traceback.

The port is checked and the first engine (and the transcription model, if one is named) is built
*before* uvicorn starts, so the failures an operator can fix (a port in use, an unknown model,
weights that cannot be read, a GPU without room for the KV cache) surface here, not inside uvicorn's lifespan (which prints tracebacks).
The engine then serves under the supervisor (gateway/supervisor.py), which rebuilds it the
same way when it dies; with --replicas, each Ray replica under its own (gateway/ray_cluster.py). Anything not mapped here is a bug and keeps its traceback.

SIGTERM or Ctrl+C stops the server gracefully (DrainingServer): responses in flight finish within
--drain-timeout, the app's lifespan shuts the engine down, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from gateway.config import GatewaySettings
from gateway.input_transcription import InputTranscriber

log = logging.getLogger("voxgate.gateway")

if TYPE_CHECKING:
    from gateway.app import Gateway

# What the engine's own process, or a Ray replica, reports as "<ExceptionType>: <message>"
# (engine/process_engine.py, engine/ray_replica.py).
_CHILD_FAILURES = ("the engine process failed to start: ", "the engine replica failed to start: ")


def check_port(host: str, port: int) -> None:
    """Raise the OSError that binding `host:port` would raise, before anything is loaded."""
    if port == 0:
        return  # any free port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        probe.bind((host, port))


def listen_host(host: str) -> str:
    """The address to bind: an IPv6 literal may be given as in a URL, `[::]`."""
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def explain(exc: BaseException, settings: GatewaySettings) -> str | None:
    """One line saying what went wrong and what to do, or None: not a configuration error."""
    name, text = type(exc).__name__, str(exc)
    for prefix in _CHILD_FAILURES:
        if isinstance(exc, RuntimeError) and text.startswith(prefix):
            name, _, text = text.removeprefix(prefix).partition(": ")
    first = text.strip().splitlines()[0] if text.strip() else name
    if isinstance(exc, socket.gaierror):  # before OSError: its errno is a resolver code
        return (
            f"cannot resolve --host {settings.host}: {exc.strerror or first}; give an address "
            "of this machine or a name it resolves"
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (
            f"port {settings.port} on {settings.host} is already in use: stop the server "
            "that holds it, or pass another --port"
        )
    if isinstance(exc, OSError) and exc.errno == errno.EACCES and exc.filename is None:
        return f"no permission to listen on port {settings.port}: use a port above 1023"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {settings.host}: it is not an address of this machine (--host)"
    if "OutOfMemoryError" in name or "out of memory" in first.lower():
        return (
            "the GPU ran out of memory loading the model or its KV cache: lower "
            "--kv-memory-fraction or --max-num-seqs, free the GPU of other processes, or serve "
            "a smaller model "
            f"({first})"
        )
    if isinstance(exc, PermissionError | IsADirectoryError | FileNotFoundError) or name in (
        "PermissionError",
        "IsADirectoryError",
        "FileNotFoundError",
    ):
        where = getattr(exc, "filename", None) or first
        return f"cannot read the model's files ({where}): check --model's path and its permissions"
    if isinstance(exc, ValueError) or name in ("CheckpointError", "ConfigError"):
        return first  # configuration and checkpoint errors already say what to do
    return None


def log_access(settings: GatewaySettings) -> None:
    """Who may connect, logged once the configuration is known to be good (a bad one ends in
    its own error line, with no warning about keys before it)."""
    if settings.auth_enabled:
        log.info("API keys: %d configured (values are never logged)", len(settings.api_keys))
    else:
        log.warning(
            "no API keys configured: anyone who can reach %s:%d may connect",
            settings.host,
            settings.port,
        )


def serve(settings: GatewaySettings, log_level: str) -> int:
    """Check the port, build and supervise the engine, serve until stopped; 2 with one line on
    stderr for a bad configuration."""
    from gateway.app import build_engine_for, create_app, uvicorn_config
    from gateway.supervisor import SupervisedEngine

    settings = dataclasses.replace(settings, host=listen_host(settings.host))
    factory: Callable = lambda: build_engine_for(settings)  # noqa: E731 - rebuilt on restart
    if settings.gateway_processes > 1:
        return _serve_processes(settings, log_level)
    transcriber = None
    try:
        check_port(settings.host, settings.port)
        if settings.input_transcription_model:  # before the engine: a bad name fails at once
            transcriber = InputTranscriber(settings.input_transcription_model)
        if settings.replicas:
            from gateway.ray_cluster import build_replica_pool  # imports Ray

            engine = build_replica_pool(settings)
        else:
            engine = SupervisedEngine(factory, factory())
    except Exception as exc:  # noqa: BLE001 - mapped to one line, or raised again
        line = explain(exc, settings)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    log_access(settings)
    # Its lifespan shuts the engine down (and closes the transcriber).
    app = create_app(settings, engine, owns_engine=True, transcriber=transcriber)
    gateway = app.state.gateway
    try:
        DrainingServer(uvicorn_config(app, settings, log_level=log_level), gateway, settings).run()
    finally:
        if not gateway.engine_shut_down:  # the lifespan never ran, or a second signal cut it
            asyncio.run(engine.shutdown())
    return 0


class DrainingServer(uvicorn.Server):
    """uvicorn's server, stopping gracefully. On SIGTERM or Ctrl+C the gateway drains first
    (Gateway.drain: /ready 503 and new sessions refused at once, responses in flight finish
    within --drain-timeout, the sessions still open closed with 1001); then uvicorn shuts down,
    giving HTTP requests in flight what is left of the drain time (at least close_timeout_s;
    Config.timeout_graceful_shutdown), and runs the lifespan's shutdown, which stops the
    engine. Left alone, uvicorn would close every WebSocket at once (1012) and re-raise the
    signal (exit -15); a handled signal exits 0. A second signal stops at once."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway, settings: GatewaySettings):
        super().__init__(config)
        self._gateway = gateway
        self._settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._drain: asyncio.Task | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self._stopping:  # still starting, or asked twice: now
            self.force_exit = self._stopping
            self.should_exit = True
            return
        self._stopping = True
        self._loop.call_soon_threadsafe(self._start_drain)  # safe from a signal handler

    def _start_drain(self) -> None:
        self._drain = asyncio.create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        deadline = time.monotonic() + self._settings.drain_timeout_s
        try:
            await self._gateway.drain(self._settings.drain_timeout_s)
        finally:
            left = deadline - time.monotonic()
            self.config.timeout_graceful_shutdown = max(left, self._settings.close_timeout_s)
            self.should_exit = True


def _serve_processes(settings: GatewaySettings, log_level: str) -> int:
    """Several gateway processes on one port sharing the replicas (gateway/gateway_processes.py),
    with the same one-line errors."""
    from gateway.gateway_processes import serve_processes

    try:
        check_port(settings.host, settings.port)
        if settings.input_transcription_model:  # each process loads its own: checked here once
            InputTranscriber(settings.input_transcription_model).close()
        log_access(settings)
        return serve_processes(settings, log_level)
    except Exception as exc:  # noqa: BLE001 - mapped to one line, or raised again
        line = explain(exc, settings)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
