"""The fp8 KV cache on the CPU path (SDPA): storage, saturation, and what rounding costs."""

from __future__ import annotations

import torch

from engine.attention import KVCache, SdpaBackend, StepLayout, gather_kv, store_kv
from engine.config import EngineConfig
from engine.request import ConfigError


def test_store_saturates_instead_of_overflowing_to_nan():
    cache = torch.zeros(8, 2, 4, dtype=torch.float8_e4m3fn)
    x = torch.tensor([1e4, -1e4, 3.0, 0.1]).repeat(2, 2, 1)  # [2, 2, 4]
    store_kv(cache, torch.tensor([5, 1]), x)
    back = gather_kv(cache, torch.tensor([5, 1]), torch.float32)
    assert not torch.isnan(back).any()
    assert back[..., 0].eq(448).all() and back[..., 1].eq(-448).all()
    torch.testing.assert_close(back[..., 2:], x[..., 2:], rtol=1 / 16, atol=0)


def test_the_fused_write_leaves_the_eager_writes_bytes():
    """store_kv_pair's fused fp8 write (compiled on a GPU; compiled here on the CPU, where
    the engine keeps the eager writes) saturates and scatters k and v as store_kv does,
    byte for byte, for row counts its one program shares."""
    from engine.attention import _fused_fp8_store
    from engine.compile_guard import CompiledOrEager

    fused = _fused_fp8_store()
    assert isinstance(fused, CompiledOrEager)
    torch.manual_seed(0)
    shape = (64, 2, 8)
    for rows in (5, 3):
        slots = torch.randperm(shape[0])[:rows]
        k, v = (torch.randn(rows, *shape[1:], dtype=torch.bfloat16) * 300 for _ in range(2))
        eager = [torch.zeros(shape, dtype=torch.float8_e4m3fn) for _ in range(2)]
        store_kv(eager[0], slots, k)
        store_kv(eager[1], slots, v)
        compiled = [torch.zeros(shape, dtype=torch.float8_e4m3fn) for _ in range(2)]
        with torch.inference_mode():
            fused(*compiled, slots, k, v)
        assert not fused.failed
        for a, b in zip(eager, compiled, strict=True):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_fp8_attention_is_the_bf16_attention_within_fp8_rounding():
    torch.manual_seed(0)
    hq, hkv, d, bs = 6, 2, 32, 4
    # Request 0: 9 tokens on pages 0, 1, 4, the last 3 new this step (slots 6, 7, 16);
    # request 1: 6 tokens on pages 2, 3, the last new (slot 13).
    layout = StepLayout(
        query_lens=[3, 1],
        context_lens=[9, 6],
        slot_mapping=[6, 7, 16, 13],
        block_tables=[[0, 1, 4], [2, 3]],
        block_size=bs,
    )
    keys, values = torch.randn(24, hkv, d), torch.randn(24, hkv, d)
    q, k, v = torch.randn(4, hq, d), torch.randn(4, hkv, d), torch.randn(4, hkv, d)
    outs = []
    for storage in (torch.float32, torch.float8_e4m3fn):
        cache = KVCache(1, 5, bs, hkv, d, storage, torch.device("cpu"), torch.float32)
        store_kv(cache.k[0], torch.arange(24), keys)
        store_kv(cache.v[0], torch.arange(24), values)
        backend = SdpaBackend(cache)
        backend.prepare(layout)
        outs.append(backend.forward(0, q, k, v))
    assert outs[1].dtype == torch.float32
    err = (outs[1] - outs[0]).abs().max().item()
    assert 0 < err < 0.1, err  # rounded, and only by e4m3's 3 mantissa bits


def test_kv_cache_dtype_is_validated():
    assert EngineConfig(kv_cache_dtype="fp8").kv_cache_dtype == "fp8"
    try:
        EngineConfig(kv_cache_dtype="int4")
    except ConfigError as exc:
        assert "kv_cache_dtype" in str(exc)
    else:
        raise AssertionError("int4 was accepted")
