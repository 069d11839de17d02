"""The fp8 KV cache (`EngineConfig.kv_cache_dtype="fp8"`, `voxgate serve --kv-cache-dtype fp8`):
storage in float8 e4m3 with saturation, attention in the model's dtype, twice the pool per
byte, and an engine that serves with it. The GPU kernels' side (FlashInfer reading fp8 pages)
is checked against this SDPA path in tests/gpu."""

from __future__ import annotations

import pytest
import torch

from engine.attention import KVCache, SdpaBackend, StepLayout, kv_storage_dtype, store_kv
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import ConfigError, SamplingParams
from models.registry import load_model


def _attend(dtype: torch.dtype, q, k, v, context: int) -> torch.Tensor:
    """One request: `context` tokens prefilled, then its last query attends to all."""
    heads, dim = k.shape[1], k.shape[2]
    cache = KVCache(1, 8, 16, heads, dim, dtype, torch.device("cpu"), compute_dtype=q.dtype)
    attn = SdpaBackend(cache)
    table = list(range(-(-context // 16)))
    attn.prepare(StepLayout([context], [context], list(range(context)), [table], 16))
    return attn.forward(0, q, k, v)


def test_fp8_attention_stays_close_to_full_precision():
    gen = torch.Generator().manual_seed(0)
    context, hq, hkv, dim = 100, 6, 2, 64
    q = torch.randn(context, hq, dim, generator=gen)
    k = torch.randn(context, hkv, dim, generator=gen)
    v = torch.randn(context, hkv, dim, generator=gen)
    full = _attend(torch.float32, q, k, v, context)
    fp8 = _attend(torch.float8_e4m3fn, q, k, v, context)
    assert fp8.dtype == torch.float32 and torch.isfinite(fp8).all()
    rel = (fp8 - full).norm() / full.norm()
    assert 1e-4 < rel < 0.05  # rounded (so not the same numbers), yet close


def test_fp8_store_saturates_instead_of_overflowing():
    cache = torch.zeros(4, 1, 2, dtype=torch.float8_e4m3fn)
    store_kv(cache, torch.tensor([0, 1]), torch.tensor([[[1e4, -1e4]], [[0.5, 3.0]]]))
    out = cache.float()
    assert torch.isfinite(out).all()
    assert out[0, 0].tolist() == [448.0, -448.0] and out[1, 0].tolist() == [0.5, 3.0]


def test_fp8_pool_holds_more_tokens_for_the_same_memory():
    full = KVCache.bytes_per_block(4, 16, 2, 64, torch.bfloat16)
    assert KVCache.bytes_per_block(4, 16, 2, 64, kv_storage_dtype("fp8", torch.bfloat16)) == (
        full // 2
    )
    assert kv_storage_dtype("auto", torch.bfloat16) == torch.bfloat16
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int4")


def test_engine_serves_from_an_fp8_cache(tiny_orpheus_dirs):
    model = load_model("tiny-orpheus", device=torch.device("cpu"), dtype=torch.float32)
    blocks = {}
    for kv in ("auto", "fp8"):
        config = EngineConfig(kv_cache_dtype=kv, kv_cache_mb=8)
        core = EngineCore(model, config, torch.device("cpu"), "sdpa")
        assert core.worker.attn.cache.k[0].dtype == kv_storage_dtype(kv, torch.float32)
        blocks[kv] = core.blocks.num_blocks
        params = SamplingParams(max_tokens=49, min_tokens=49, seed=0)
        request = core.add_request(SpeechRequest("Hello there, fp8.", sampling=params))
        audio = 0
        while core.has_work():
            audio += sum(len(e.pcm) for e in core.step() if hasattr(e, "pcm"))
        assert len(request.output_ids) == 49 and audio == 7 * 2048  # 49 codes: 7 SNAC frames
        assert core.blocks.num_used == 0
        core.close()
    assert blocks["fp8"] == 4 * blocks["auto"]  # fp32 model: a quarter of the bytes per token


def test_the_model_sees_nearly_the_same_hidden_states_through_fp8(tiny_orpheus_dirs):
    """The tiny model's random logits are near ties over its 156,940-token vocabulary, so its
    greedy tokens are no measure; the last hidden state of a prefill through each cache is."""
    model = load_model("tiny-orpheus", device=torch.device("cpu"), dtype=torch.float32)
    ids = model.preprocess("Hello there, fp8.", None).token_ids
    n, s = len(ids), model.shape
    hidden = {}
    for dtype in (torch.float32, torch.float8_e4m3fn):
        cache = KVCache(
            s.num_layers, 16, 16, s.num_kv_heads, s.head_dim, dtype, torch.device("cpu")
        )
        attn = SdpaBackend(cache)
        attn.prepare(StepLayout([n], [n], list(range(n)), [list(range(-(-n // 16)))], 16))
        hidden[dtype] = model.forward(torch.tensor(ids), torch.arange(n), attn)[-1]
    full, fp8 = hidden[torch.float32], hidden[torch.float8_e4m3fn]
    assert 1e-4 < ((fp8 - full).norm() / full.norm()).item() < 0.03
