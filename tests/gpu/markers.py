"""Marks of the GPU tests."""

from __future__ import annotations

import importlib.util

import pytest

# Tests of FlashInfer's attention, decode graphs or fused kernels.
needs_flashinfer = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None,
    reason="flashinfer (the gpu extra) is not installed",
)
