"""Which device an engine runs on (engine/factory.py resolve_device): `--device` as given where
this machine has it, refused at start with one line naming the flag and what it takes where it
does not, instead of torch's own parse error listing every backend it knows."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.factory import resolve_device
from engine.request import ConfigError


def test_cpu_and_the_default_resolve():
    assert resolve_device(EngineConfig(device="cpu")) == torch.device("cpu")
    assert resolve_device(EngineConfig(device="cpu:0")) == torch.device("cpu:0")  # no GPU asked
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(EngineConfig()).type == expected


@pytest.mark.parametrize("device", ["tpu", "nvidia", "cuda:x", "mps", ""])
def test_a_device_voxgate_does_not_run_on_is_refused_naming_the_flag(device):
    with pytest.raises(ConfigError) as refused:
        resolve_device(EngineConfig(device=device))
    message = str(refused.value)
    assert message.startswith(f"--device {device!r}") and "cpu, cuda or cuda:N" in message
    assert "privateuseone" not in message  # not torch's list of every backend


def test_a_gpu_this_machine_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device(EngineConfig(device="cuda:1")) == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"--device 'cuda:2'.* 2 CUDA GPUs.*cuda:0 to cuda:1"):
        resolve_device(EngineConfig(device="cuda:2"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        resolve_device(EngineConfig(device="cuda"))
