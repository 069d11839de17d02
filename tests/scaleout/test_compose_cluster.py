"""docker-compose.yml's `cluster` profile: a Ray head that runs the gateway with replicas on
the cluster, and GPU workers that join it, on this machine or on others (docs/scale-out.md,
"Docker Compose", whose recipe names these services)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def cluster_services() -> tuple[dict, dict]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    return services["ray-head"], services["ray-worker"]


def test_cluster_profile_runs_the_gateway_on_the_head_and_gpus_on_workers():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    head, worker = cluster_services()
    assert head["profiles"] == worker["profiles"] == ["cluster"]
    assert "profiles" not in services["voxgate"]  # `docker compose up` stays one GPU, no Ray
    head_cmd = head["command"][-1]
    assert "ray start --head --port=6379" in head_cmd
    assert "voxgate serve" in head_cmd and "--replicas" in head_cmd
    assert "--ray-address auto" in head_cmd
    assert "--port ${VOXGATE_PORT:-8000}" in head_cmd
    assert "ray start --address=" in worker["command"][-1]
    assert "--block" in worker["command"][-1]
    gpus = worker["deploy"]["resources"]["reservations"]["devices"][0]
    # All the machine's GPUs, one worker a machine: Ray gives each replica one. (`count: 1` with
    # --scale gave every worker the machine's first GPU.)
    assert gpus["capabilities"] == ["gpu"] and gpus["count"] == "all"
    assert "deploy" not in head  # the head takes no GPU (--num-gpus=0)
    probe = " ".join(head["healthcheck"]["test"])
    assert "127.0.0.1:${VOXGATE_PORT:-8000}/health'" in probe


def test_nodes_on_other_machines_can_reach_each_other_and_no_worker_starts_a_head():
    """Ray's nodes reach each other at the address each advertises, on ports each picks at
    start: both services are on the host's network (a container on compose's network
    advertises an address other machines cannot reach), so the head's 6379 and the gateway's
    port are the host's, with nothing to publish. A worker started alone on another machine
    starts no head there (no depends_on)."""
    head, worker = cluster_services()
    assert head["network_mode"] == worker["network_mode"] == "host"
    assert "ports" not in head and "ports" not in worker  # the host's own, unpublished
    assert "depends_on" not in worker
    assert "VOXGATE_RAY_HEAD=${VOXGATE_RAY_HEAD:-}" in worker["environment"]


def interpolated(command: str) -> str:
    """The command as compose runs it: every `$` the shell is to see is escaped as `$$`,
    compose's own variables aside."""
    return command.replace("$$", "$")


@pytest.mark.parametrize("head", ["10.0.0.5:6379", ""])
def test_a_worker_joins_the_head_it_is_given_or_the_one_on_its_machine(tmp_path, head):
    """VOXGATE_RAY_HEAD set: that head. Unset (the head's own machine): this host's address as
    the head advertises it (Ray's get_node_ip_address), port 6379; not a compose service name,
    which the host's network cannot resolve."""
    ray_util = pytest.importorskip("ray.util")
    _, worker = cluster_services()
    command = worker["command"][-1]
    assert "$" not in command.replace("$$", "")  # nothing left for compose to interpolate
    fake_ray = tmp_path / "ray"
    fake_ray.write_text('#!/bin/sh\necho "$@"\n')
    fake_ray.chmod(0o755)
    path = os.pathsep.join([str(tmp_path), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "VOXGATE_RAY_HEAD": head}
    ran = subprocess.run(
        ["sh", "-c", interpolated(command)], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    joined = head or f"{ray_util.get_node_ip_address()}:6379"
    assert ran.stdout.split()[:2] == ["start", f"--address={joined}"], ran.stdout


def test_the_scale_out_recipe_starts_the_cluster_profiles_services():
    """docs/scale-out.md's compose commands name the cluster profile's services, start one
    worker a machine, and the one for another machine starts a worker joining
    VOXGATE_RAY_HEAD, nothing else."""
    services = set(yaml.safe_load(COMPOSE.read_text())["services"])
    doc = (ROOT / "docs" / "scale-out.md").read_text()
    ups = re.findall(r"^(.*docker compose --profile cluster up.*)$", doc, re.M)
    assert len(ups) >= 2, ups
    for line in ups:
        named = line.split(" up ", 1)[1].split()
        named = [w for w in named if not w.startswith("-") and "=" not in w]
        assert named and set(named) <= services, line
    remote = [line for line in ups if line.startswith("VOXGATE_RAY_HEAD=")]
    assert remote and all(line.rstrip().endswith(" ray-worker") for line in remote), remote
    # One worker a machine with all its GPUs: a scaled worker would share the first GPU.
    assert not any("--scale" in line for line in ups), ups
    assert "network_mode: host" in doc or "host's network" in doc


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
