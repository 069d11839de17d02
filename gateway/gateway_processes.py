"""`voxgate serve --replicas N --gateway-processes K`: K gateway processes on one port, all
serving from the same N engine replicas, so that one Python event loop (WebSocket frames, Opus,
pacing) is not the ceiling.

This process owns the Ray runtime (or joins `--ray-address`) and the replicas (actors named in
the server's own Ray namespace, --ray-namespace or one made for it: gateway/ray_cluster.py),
supervises them — a dead replica is rebuilt here — and runs no
gateway itself. Each gateway process joins the same Ray runtime, attaches to every replica by
name (engine/ray_engine.py: `RayEngine.attach`; a replica serves several callers), and listens
on the port with SO_REUSEPORT: the kernel spreads new connections over the processes. A
gateway process places its own sessions by the replicas' stats (which count every gateway's
streams) and its own pins. One that exits unexpectedly is started again; one whose server
process is gone (killed) ends itself (engine/parent_watch.py).

Log lines of a gateway process carry `gateway-<i>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import signal
import socket
import sys

from engine.parent_watch import exit_with_parent
from gateway.config import GatewaySettings

log = logging.getLogger("voxgate.gateway")

# A stopping gateway process drains (--drain-timeout), then closes its sockets: this long
# more before it is killed.
CHILD_STOP_MARGIN_S = 10.0


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port that other processes may bind too (SO_REUSEPORT)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise RuntimeError("--gateway-processes needs SO_REUSEPORT (Linux); use 1 here")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def serve_processes(settings: GatewaySettings, log_level: str) -> int:
    """Start the shared replicas, then the gateway processes; serve until SIGINT/SIGTERM."""
    import ray

    from gateway.ray_cluster import build_replica_pool, with_namespace

    # The replicas are named in this server's own Ray namespace, and the gateway processes
    # are given the same settings: they find these replicas, never another server's.
    settings = with_namespace(settings)
    pool = build_replica_pool(settings, shared=True)
    address = ray.get_runtime_context().gcs_address
    # Held (bound, never listening) for the server's life: the port stays ours, and with
    # --port 0 it names the port the gateway processes share.
    holder = reuseport_socket(settings.host, settings.port)
    port = holder.getsockname()[1]
    ctx = mp.get_context("spawn")

    def start(index: int) -> mp.Process:
        child = ctx.Process(
            target=_gateway_main,
            args=(settings, port, address, index, log_level),
            name=f"voxgate-gateway-{index}",
        )
        child.start()
        return child

    children = [start(i) for i in range(settings.gateway_processes)]
    try:
        asyncio.run(_supervise(pool, children, start))
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: it drains, then stops
        for child in children:
            child.join(settings.drain_timeout_s + CHILD_STOP_MARGIN_S)
            if child.is_alive():
                child.kill()
        asyncio.run(pool.shutdown())
        holder.close()
    return 0


async def _supervise(pool, children: list[mp.Process], start) -> None:
    """Watch the replicas (rebuilt here when they die) and the gateway processes (started
    again when one exits) until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pool.watch()
    try:
        while not stop.is_set():
            for i, child in enumerate(children):
                if not child.is_alive():
                    log.error(
                        "gateway process %d exited (code %s); starting it again", i, child.exitcode
                    )
                    children[i] = start(i)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await pool.stop_watching()


def _gateway_main(
    settings: GatewaySettings, port: int, address: str, index: int, log_level: str
) -> None:
    """One gateway process: attach to the replicas, serve the shared port. It ends itself when
    the server process is gone, however it died: an orphan would go on serving the port."""
    logging.basicConfig(
        level=log_level.upper(),
        format=f"%(asctime)s %(levelname)s gateway-{index} %(name)s %(message)s",
        stream=sys.stdout,
    )
    exit_with_parent(f"gateway process {index}", log)

    from gateway.app import create_app, uvicorn_config
    from gateway.ray_cluster import attach_replica_pool
    from gateway.startup import DrainingServer

    pool = attach_replica_pool(settings, address)
    sock = reuseport_socket(settings.host, port)
    app = create_app(settings, pool)
    # log_config None: uvicorn's lines go through the format above (which process said it).
    config = uvicorn_config(app, settings, log_level=log_level, port=port, log_config=None)
    # The server process's SIGTERM reaches each gateway process, which drains as one server
    # does (docs/gateway.md, "Stopping").
    server = DrainingServer(config, app.state.gateway, settings)
    try:
        asyncio.run(_serve(server, sock, index))
    finally:
        asyncio.run(pool.shutdown())  # detaches: the replicas serve the other processes on


async def _serve(server, sock: socket.socket, index: int) -> None:
    """uvicorn on the shared socket; it announces no address for a socket it is handed, so
    this process says where it listens once uvicorn is up."""
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if server.started:
        host, port = sock.getsockname()[:2]
        log.info(
            "Uvicorn running on http://%s:%d (gateway process %d of the port)", host, port, index
        )
    await serving
