"""docker-compose.yml's `cluster` profile: a Ray head that runs the gateway with replicas on
the cluster, and GPU workers that join it (docs/scale-out.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def test_cluster_profile_runs_the_gateway_on_the_head_and_gpus_on_workers():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    head, worker = services["ray-head"], services["ray-worker"]
    assert head["profiles"] == worker["profiles"] == ["cluster"]
    assert "profiles" not in services["voxgate"]  # `docker compose up` stays one GPU, no Ray
    head_cmd = head["command"][-1]
    assert "ray start --head --port=6379" in head_cmd
    assert "voxgate serve" in head_cmd and "--replicas" in head_cmd
    assert "--ray-address auto" in head_cmd
    assert "ray start --address=${VOXGATE_RAY_HEAD:-ray-head:6379}" in worker["command"][-1]
    assert "--block" in worker["command"][-1]
    gpus = worker["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["capabilities"] == ["gpu"] and gpus["count"] == 1
    assert "deploy" not in head  # the head takes no GPU (--num-gpus=0)
    assert "/health'" in " ".join(head["healthcheck"]["test"])


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_available(), reason="docker compose is not installed")
def test_cluster_profile_is_valid():
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "--profile", "cluster", "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
