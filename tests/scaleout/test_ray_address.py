"""--ray-address that leads nowhere ends `voxgate serve` at once with one line: a host:port
nothing answers on (Ray itself would retry for minutes), and `auto` with no cluster running
on this machine (Ray raised a ConnectionError traceback)."""

from __future__ import annotations

import socket
import time

import pytest

from engine.api import ConfigError
from gateway.config import GatewaySettings
from gateway.ray_cluster import check_reachable, connect

ray = pytest.importorskip("ray")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free, and nothing listens once closed


def test_a_head_nothing_answers_on_is_refused_at_once():
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(ConfigError, match=f"cannot reach the Ray head at --ray-address {address}"):
        check_reachable(address)
    assert time.monotonic() - started < 5


def test_auto_and_ray_addresses_are_left_to_ray():
    check_reachable("auto")
    check_reachable("ray://example.invalid:10001")


def test_auto_with_no_cluster_running_is_one_line(monkeypatch):
    if ray.is_initialized():
        pytest.skip("a Ray runtime is already connected in this process")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = GatewaySettings(replicas=1, ray_address="auto")
    with pytest.raises(ConfigError, match="no Ray cluster found at --ray-address auto"):
        connect(settings)
