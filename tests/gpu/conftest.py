"""Fixtures of the GPU tests (tests/conftest.py skips them without CUDA)."""

from __future__ import annotations

import pytest
import torch

from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import TINY_SIZES, cosyvoice2_yaml

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def float32_precision_kept():
    """No test leaves its float32 precision to the next: serving float32 SNAC sets cuBLAS'
    TF32 process-wide (models/device_util.py, gemms_in_conv_precision), which would change
    what a later test's float32 comparison computes."""
    before = torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision
    yield
    torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision = before


@pytest.fixture
def ieee_float32():
    """Float32 convs (cuDNN) and GEMMs (cuBLAS) in IEEE float32, not TF32, for a test's
    duration: an eager call and a graph captured at a padded batch size, or jobs grouping
    requests differently, may pick different algorithms, and TF32's rounding (~2e-4 of a
    sample on an H200) would then differ between the two. Through
    torch's precision API only (`fp32_precision`): torch refuses a mix of it and the legacy
    `allow_tf32` flags, and the SNAC detokenizer sets its GEMMs' through it."""
    before = torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    yield
    torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision = before


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flow_hift_gpu")
    (folder / "cosyvoice2.yaml").write_text(cosyvoice2_yaml(TINY_SIZES))
    cfg = parse_config(read_yaml(folder / "cosyvoice2.yaml"))
    torch.manual_seed(5)
    flow, hift = CausalFlow(cfg.flow).eval(), HiFTGenerator(cfg.hift).eval()
    hift.fold_weight_norm()
    return flow.to(CUDA), hift.to(CUDA), cfg.chunk_size
