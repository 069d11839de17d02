"""Scale-out on Ray (gateway/ray_cluster.py): a real `voxgate serve --replicas 2` on loopback,
its replicas local Ray actors on the CPU; and the compose file's cluster profile."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))  # reliability_kit: ServeProcess, metrics
sys.path.insert(0, str(HERE.parent / "gateway"))  # gateway_testkit
sys.path.insert(0, str(HERE))  # scaleout_kit

from reliability_kit import ServeProcess  # noqa: E402


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory) -> Iterator[ServeProcess]:
    """voxgate-tiny on two CPU replicas (one core each). Real-time admission is off: on a shared
    CI core one stream is already slower than real time, and these tests need several live
    streams at once on each replica."""
    log = tmp_path_factory.mktemp("serve") / "replicas.log"
    server = ServeProcess(
        "--replicas",
        "2",
        "--replica-cpus",
        "1",
        "--device",
        "cpu",
        "--no-realtime-admission",
        "--kv-cache-mb",
        "32",
        log=log,
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def two_gateways(tmp_path_factory) -> Iterator[ServeProcess]:
    """Two gateway processes on one port sharing one CPU replica of voxgate-tiny."""
    log = tmp_path_factory.mktemp("serve") / "gateways.log"
    server = ServeProcess(
        "--replicas",
        "1",
        "--gateway-processes",
        "2",
        "--device",
        "cpu",
        "--no-realtime-admission",
        "--kv-cache-mb",
        "32",
        log=log,
    )
    yield server
    server.stop()
