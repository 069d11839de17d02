"""Real-time admission's price of a KV page (engine/memory_bandwidth.py) on a GPU: the copy
bandwidth is a data-center GPU's (hundreds of GB/s at least; an H200 moves ~4.3 TB/s), and an
Orpheus page in fp8 (917,504 bytes) costs a fraction of a microsecond, as its served turns
showed (0.217-0.250 µs a page on an H200, 0.297-0.305 on an H100: BENCHMARKS.md).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from engine.memory_bandwidth import copy_bandwidth, page_seconds

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
ORPHEUS_FP8_PAGE = 28 * 2 * 8 * 128 * 16  # layers x (k, v) x heads x head_dim x tokens


def test_a_page_costs_its_bytes_at_the_measured_bandwidth():
    bandwidth = copy_bandwidth(CUDA)
    assert bandwidth > 2e11
    page = page_seconds(CUDA, ORPHEUS_FP8_PAGE)
    assert 0 < page < 5e-6
    # Measured twice, the price agrees within the machine's noise.
    assert page == pytest.approx(ORPHEUS_FP8_PAGE / bandwidth, rel=0.25)
