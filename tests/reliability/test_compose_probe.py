"""docker-compose.yml probes the server's liveness (/health), not its readiness: an engine
restarting in place is not a reason to kill the container (docs/gateway.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
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


def _yaml_blocks(doc: str) -> list:
    text = (COMPOSE.parent / "docs" / doc).read_text()
    return [
        yaml.safe_load(textwrap.dedent(block))
        for block in re.findall(r"```yaml\n(.*?)^\s*```", text, re.DOTALL | re.MULTILINE)
    ]


def _allows_loading(probe: dict) -> bool:
    """A startup probe on /health with ten minutes or more for loading the model (nothing
    answers before the engine is warmed up)."""
    window_s = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    return probe["httpGet"]["path"] == "/health" and window_s >= 600


def test_kubernetes_probes_wait_for_the_model_to_load():
    (probes,) = [b for b in _yaml_blocks("gateway.md") if "startupProbe" in (b or {})]
    assert _allows_loading(probes["startupProbe"])
    assert probes["livenessProbe"]["httpGet"]["path"] == "/health"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/ready"
    (cluster,) = [b for b in _yaml_blocks("scale-out.md") if b.get("kind") == "RayCluster"]
    (head,) = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert _allows_loading(head["startupProbe"])
    assert head["livenessProbe"]["httpGet"]["path"] == "/health"
