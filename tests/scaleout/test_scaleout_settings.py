"""The scale-out settings (gateway/config.py, group "scale-out (Ray)") and Ray's cost when they
are not used: none, not even an import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.request import ConfigError
from gateway.config import GatewaySettings
from gateway.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_replicas_come_from_the_command_line_the_environment_and_the_file(tmp_path):
    assert GatewaySettings().replicas == 0  # one engine, no Ray
    given = load_settings({"replicas": 4, "ray_address": "auto"}, environ={})
    assert (given.replicas, given.ray_address) == (4, "auto")
    env = {"VOXGATE_REPLICAS": "2", "VOXGATE_REPLICA_CPUS": "1.5"}
    from_env = load_settings({}, environ=env)
    assert (from_env.replicas, from_env.replica_cpus, from_env.replica_gpus) == (2, 1.5, None)
    file = tmp_path / "voxgate.toml"
    file.write_text("replicas = 3\nreplica_gpus = 0.5\n")
    from_file = load_settings({}, environ={}, config_path=str(file))
    assert (from_file.replicas, from_file.replica_gpus) == (3, 0.5)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"ray_address": "auto"}, "give --replicas N too"),
        ({"gateway_processes": 2}, "give --replicas N too"),
        ({"replicas": 1, "gateway_processes": 0}, "gateway_processes must be in [1, 256]"),
        ({"replicas": -1}, "replicas must be in [0, 4096]"),
        ({"replicas": 2, "replica_cpus": 0}, "replica_cpus must be >= 0.01"),
        ({"replicas": 2, "replica_gpus": -1.0}, "replica_gpus must be in [0, 64]"),
    ],
)
def test_bad_scale_out_settings_say_what_to_do(fields, says):
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        GatewaySettings(**fields)


def test_serving_without_replicas_never_imports_ray():
    code = (
        "import sys, gateway.cli, gateway.app, gateway.startup, gateway.replica_pool;"
        "gateway.cli.build_parser();"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
