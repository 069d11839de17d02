"""Two gateway processes on one port (SO_REUSEPORT) serve from the same engine replica: each
answers connections, and sessions opened through both stream from the one replica at once."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'voxgate[ray]'")

from reliability_kit import ServeProcess, metrics  # noqa: E402
from scaleout_kit import replica_pid, streaming_session  # noqa: E402

_ATTACHED = re.compile(r"gateway-(\d) voxgate\.engine engine replica replica-0 ready \(pid (\d+)")
_SESSION_OPEN = re.compile(r"gateway-(\d) voxgate\.gateway session=(\S+) session open")


def gateways_of_sessions(server: ServeProcess) -> dict[str, str]:
    """session id → the gateway process that opened it, from the log."""
    return {sid: gw for gw, sid in _SESSION_OPEN.findall(server.log_text())}


async def both_attached(server: ServeProcess, timeout_s: float = 120.0) -> None:
    """Wait until both gateway processes have attached to the replica: /ready answers from
    whichever process is up, and one that is still starting takes no connections yet."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while set(dict(_ATTACHED.findall(server.log_text()))) != {"0", "1"}:
        assert asyncio.get_running_loop().time() < deadline, server.log_text()[-3000:]
        await asyncio.sleep(0.2)


async def test_two_gateway_processes_share_one_replica(two_gateways):
    server = two_gateways
    await both_attached(server)
    # The kernel spreads new connections over the processes: open sessions until both served.
    sessions = []
    for _ in range(12):
        sessions.append(await streaming_session(server))
        if len(set(gateways_of_sessions(server).values())) == 2:
            break
    assert set(gateways_of_sessions(server).values()) == {"0", "1"}, server.log_text()[-3000:]
    # Both processes attached to the one replica process the owner started, and every live
    # session (each with at least one request in flight) runs there.
    attached = dict(_ATTACHED.findall(server.log_text()))
    assert set(attached) == {"0", "1"} and len(set(attached.values())) == 1, attached
    assert str(replica_pid(server, "replica-0")) in attached.values()
    running = (await metrics(server))['voxgate_replica_running_requests{replica="replica-0"}']
    assert running >= len(sessions), (running, len(sessions))
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as client:
        body = (await client.get("/ready")).json()
    assert body["replicas"] == {"ready": 1, "total": 1}
    for ws in sessions:
        await ws.close()
    assert server.alive
