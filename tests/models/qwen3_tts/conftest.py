"""Fixtures of the Qwen3-TTS model tests: one torch thread, and the tiny preset's checkpoint
and model (fp32 on the CPU), built once per test module."""

from __future__ import annotations

import pytest
import torch

from models.qwen3_tts.checkpoint import load_qwen3_tts
from models.qwen3_tts.presets import ensure_tiny_qwen3_tts
from tests.torch_threads import one_torch_thread


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """For the whole module, the models' building included (tests/torch_threads.py: why)."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_qwen3_tts(tmp_path_factory.mktemp("q3"))


@pytest.fixture(scope="module")
def model(folder):
    return load_qwen3_tts(str(folder), torch.device("cpu"), torch.float32, name="tiny-qwen3-tts")
