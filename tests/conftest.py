"""Shared fixtures: the tiny presets live in one temporary cache per test session."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Keep test runs from writing into the user's real cache; one folder per session.
    if "VOXGATE_CACHE" not in os.environ:
        import tempfile

        os.environ["VOXGATE_CACHE"] = tempfile.mkdtemp(prefix="voxgate-test-cache-")
    # Inductor compiles on the CPU here only as the stand-in for a GPU's compile (the codecs'
    # blocks compile for CUDA graphs; nothing is served compiled on a CPU): the same graphs,
    # captured and lowered alike, in scalar C++ kernels. Vector ones would first probe
    # the CPU's instruction sets (g++ builds: ~11 s a process on a cold cache), then take
    # about twice the code generation (SNAC's noise step: 38 s against 20).
    os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (marker `gpu`); run on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_orpheus_dirs():
    """(model folder, codec folder) of the tiny-orpheus preset, in the published layouts."""
    from models.orpheus.presets import ensure_tiny_orpheus

    return ensure_tiny_orpheus()


@pytest.fixture(scope="session")
def tiny_csm_dir():
    """The tiny-csm preset's folder, in transformers' sesame/csm-1b layout (Mimi included)."""
    from models.csm.presets import ensure_tiny_csm

    return ensure_tiny_csm()


@pytest.fixture(scope="session")
def tiny_moshi_dir():
    """The tiny-moshi preset's folder, in transformers' kmhf/hf-moshiko layout (Mimi included)."""
    from models.moshi.presets import ensure_tiny_moshi

    return ensure_tiny_moshi()
