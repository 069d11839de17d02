"""Fixtures of the GPU tests (tests/conftest.py skips them without CUDA)."""

from __future__ import annotations

import pytest
import torch

from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import TINY_SIZES, cosyvoice2_yaml

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flow_hift_gpu")
    (folder / "cosyvoice2.yaml").write_text(cosyvoice2_yaml(TINY_SIZES))
    cfg = parse_config(read_yaml(folder / "cosyvoice2.yaml"))
    torch.manual_seed(5)
    flow, hift = CausalFlow(cfg.flow).eval(), HiFTGenerator(cfg.hift).eval()
    hift.fold_weight_norm()
    return flow.to(CUDA), hift.to(CUDA), cfg.chunk_size
