"""Which attention backend an engine gets (engine/factory.py resolve_attention): FlashInfer by
default only where it can serve (an NVIDIA GPU, its package, the model's head size, bfloat16 or
float16), and `--attention flashinfer` refused at start with the reason where it cannot,
instead of a KeyError from deep inside FlashInfer's kernel lookup at the first step."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from engine.attention import KVCache
from engine.config import EngineConfig
from engine.factory import resolve_attention
from engine.flashinfer_backend import FlashInferBackend
from engine.request import ConfigError

CUDA = torch.device("cuda")  # only its type is read: no GPU is touched


@pytest.fixture
def flashinfer_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "flashinfer" else real(name, *a),
    )


def test_the_default_is_flashinfer_only_where_its_kernels_serve(flashinfer_installed):
    default = EngineConfig()
    assert resolve_attention(default, CUDA, 128, torch.bfloat16) == "flashinfer"
    assert resolve_attention(default, CUDA, 64, torch.float16) == "flashinfer"
    assert resolve_attention(default, CUDA, 128, torch.float32) == "sdpa"
    assert resolve_attention(default, CUDA, 80, torch.bfloat16) == "sdpa"
    assert resolve_attention(default, torch.device("cpu"), 128, torch.bfloat16) == "sdpa"


def test_asking_for_flashinfer_where_it_cannot_serve_says_what_to_do(flashinfer_installed):
    asked = EngineConfig(attention="flashinfer")
    with pytest.raises(ConfigError, match="--dtype bfloat16, or --attention sdpa"):
        resolve_attention(asked, CUDA, 128, torch.float32)
    with pytest.raises(ConfigError, match="head sizes .* model's is 80: use --attention sdpa"):
        resolve_attention(asked, CUDA, 80, torch.bfloat16)
    with pytest.raises(ConfigError, match="needs an NVIDIA GPU"):
        resolve_attention(asked, torch.device("cpu"), 128, torch.bfloat16)
    assert resolve_attention(EngineConfig(attention="sdpa"), CUDA, 80, torch.float32) == "sdpa"


def test_the_backend_itself_refuses_a_float32_cache():
    """An engine built directly (tests, tools) with FlashInfer over a float32 cache fails at
    construction with the fix, before FlashInfer is even imported."""
    cache = KVCache(2, 4, 16, 2, 64, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        FlashInferBackend(cache, num_q_heads=4)
