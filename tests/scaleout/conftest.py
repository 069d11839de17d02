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
from scaleout_kit import TWO_REPLICAS, serving  # noqa: E402


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory) -> Iterator[ServeProcess]:
    """voxgate-tiny on two CPU replicas (one core each)."""
    with serving(tmp_path_factory, "replicas", *TWO_REPLICAS) as server:
        yield server


@pytest.fixture(scope="module")
def two_gateways(tmp_path_factory) -> Iterator[ServeProcess]:
    """Two gateway processes on one port sharing one CPU replica of voxgate-tiny."""
    args = ("--replicas", "1", "--gateway-processes", "2")
    with serving(tmp_path_factory, "gateways", *args) as server:
        yield server
