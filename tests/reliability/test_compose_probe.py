"""docker-compose.yml probes the server's liveness (/health), not its readiness: an engine
restarting in place is not a reason to kill the container (docs/gateway.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def test_compose_healthcheck_probes_liveness():
    service = yaml.safe_load(COMPOSE.read_text())["services"]["voxgate"]
    probe = " ".join(service["healthcheck"]["test"])
    assert "/health'" in probe and "/ready" not in probe
    assert service["restart"] == "unless-stopped"
    # Loading a model (and a first download) happens before /health answers at all.
    assert service["healthcheck"]["start_period"].endswith("s")


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_available(), reason="docker compose is not installed")
def test_compose_file_is_valid():
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
