"""`--fp8-weights` (models/fp8_linear.py): float8 linear layers with per-channel weight and
per-token activation scales compute what their scaled operands say, stay within float8's
rounding of the bf16/fp32 layer, and a tiny Orpheus backbone in float8 keeps its hidden
states; the engine refuses the option where it cannot run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.attention import KVCache, SdpaBackend, StepLayout
from engine.config import EngineConfig
from engine.factory import build_core
from engine.request import ConfigError
from models.fp8_linear import Fp8Linear, quantize_rows, to_fp8_linears
from models.orpheus.loading import load_orpheus

CPU = torch.device("cpu")


def relative_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())


def test_a_layer_computes_its_scaled_operands_within_float8_of_the_original():
    generator = torch.Generator().manual_seed(0)
    linear = nn.Linear(64, 48, bias=True)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(48, 64, generator=generator) * 0.05)
        linear.bias.copy_(torch.randn(48, generator=generator))
    x = torch.randn(7, 64, generator=generator) * 3
    x[2] = 0.0  # a row of zeros still gets a usable scale
    fp8 = Fp8Linear(linear)
    assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.weight_scale.shape == (1, 48)
    out = fp8(x)
    q, scale = quantize_rows(x)
    expected = (q.float() * scale) @ (fp8.weight.float() * fp8.weight_scale.t()).t() + linear.bias
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[2], linear.bias.detach())
    with torch.no_grad():
        assert relative_rms(out, linear(x)) < 0.05
    batched = fp8(x.reshape(7, 1, 64))  # leading dimensions are kept
    torch.testing.assert_close(batched.reshape(7, 48), out)


def test_a_tiny_orpheus_backbone_in_float8_keeps_its_hidden_states(tiny_orpheus_dirs):
    model = load_orpheus(*map(str, tiny_orpheus_dirs), CPU, torch.float32)
    s = model.shape
    ids = torch.arange(12) + 100
    positions = torch.arange(12)
    layout = StepLayout([12], [12], list(range(12)), [[0]], 16)

    def hidden() -> torch.Tensor:
        cache = KVCache(s.num_layers, 4, 16, s.num_kv_heads, s.head_dim, s.dtype, CPU)
        attn = SdpaBackend(cache)
        attn.prepare(layout)
        with torch.inference_mode():
            return model.forward(ids, positions, attn)

    before = hidden()
    count = to_fp8_linears(model.fp8_linear_regions())
    assert count == 4 * s.num_layers  # qkv, o, gate_up, down in every layer
    assert all(not isinstance(m, nn.Linear) for m in model.llm.layers.modules())
    after = hidden()
    cosine = torch.nn.functional.cosine_similarity(after, before, dim=-1)
    assert cosine.min() > 0.99, cosine.min()


def test_layers_that_float8_gemms_cannot_take_are_refused():
    with pytest.raises(ValueError, match="divisible by 16"):
        to_fp8_linears([nn.Sequential(nn.Linear(64, 40))])


def test_the_engine_refuses_fp8_weights_where_they_cannot_run(tiny_orpheus_dirs):
    model = load_orpheus(*map(str, tiny_orpheus_dirs), CPU, torch.float32)
    with pytest.raises(ConfigError, match="--fp8-weights: float8 weights are for NVIDIA GPUs"):
        build_core(model, EngineConfig(num_kv_blocks=16, fp8_weights=True), CPU)
