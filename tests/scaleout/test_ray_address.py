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


@pytest.mark.parametrize(
    ("device", "address", "cluster_gpus", "gpus"),
    [
        ("cpu", "auto", 8, 0.0),  # --device cpu: never a GPU
        ("", "auto", 0, 1.0),  # a cluster: its GPU workers may join after the gateway starts
        ("cuda", "10.0.0.5:6379", 0, 1.0),
        ("", None, 0, 0.0),  # this machine, no GPU: CPU replicas
        ("", None, 2, 1.0),
    ],
)
def test_a_replica_takes_a_gpu_by_default_where_one_may_come(device, address, cluster_gpus, gpus):
    from gateway.ray_cluster import default_replica_gpus

    assert default_replica_gpus(device, address, cluster_gpus) == gpus


def test_cuda_replicas_with_no_gpu_are_refused(monkeypatch):
    from gateway import ray_cluster

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    from engine.config import EngineConfig

    settings = GatewaySettings(replicas=1, replica_gpus=0, engine=EngineConfig(device="cuda"))
    with pytest.raises(ConfigError, match="--device cuda with replicas of no GPU"):
        ray_cluster.replica_resources(settings)
