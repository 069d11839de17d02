"""The real gateway (`gateway.app`, uvicorn) served from a thread of this process on an
ephemeral loopback port, over an engine the caller built: what the gateway's tests and the
CPU harnesses (bench/duplex_gateway_load.py) run against. `voxgate serve` is the way to serve."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class InThreadGateway:
    url: str  # ws://127.0.0.1:PORT/v1/stream
    http: str  # http://127.0.0.1:PORT
    port: int
    server: Any  # uvicorn.Server
    thread: threading.Thread
    sock: socket.socket
    app: Any

    def stop(self, timeout_s: float = 15.0) -> None:
        """Shut the server down (the app's shutdown stops its worker processes)."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout_s)
        self.sock.close()


def serve_in_thread(
    settings,
    engine,
    sndbuf: int | None = None,
    wrap: Callable[[Callable], Callable] | None = None,
    start_timeout_s: float = 30.0,
) -> InThreadGateway:
    """uvicorn in a daemon thread on an ephemeral port, started. `sndbuf` caps the kernel send
    buffer of the accepted sockets (they inherit it from the listener), standing in for a slow
    network path: on loopback, autotuning would otherwise let megabytes vanish into the
    kernel. `wrap` wraps the thread's target (a profiler around the event loop's thread)."""
    import uvicorn

    from gateway.app import create_app, uvicorn_config

    app = create_app(settings, engine=engine)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
    target = server.run if wrap is None else wrap(server.run)
    thread = threading.Thread(target=target, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    return InThreadGateway(
        f"ws://127.0.0.1:{port}/v1/stream", f"http://127.0.0.1:{port}", port, server, thread,
        sock, app,
    )  # fmt: skip
