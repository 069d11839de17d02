"""Attention over the paged KV cache, behind one interface.

The model calls `attn.forward(layer, q, k, v)` for all tokens of the step at once; the backend
writes k/v into the cache at the step's slots and attends each token to its own request's
context. Backends: `SdpaBackend` (torch SDPA; CPU and the fallback everywhere) and, on NVIDIA
GPUs, a FlashInfer backend implementing the same interface.
"""

from __future__ import annotations

import abc
import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.compile_guard import CompiledOrEager
from models.device_util import upload


@dataclass
class StepLayout:
    """Where the step's tokens sit, computed on the host from block tables (pure integers)."""

    query_lens: list[int]  # tokens of each request in this step
    context_lens: list[int]  # tokens of each request in the cache after this step
    slot_mapping: list[int]  # [T] cache slot each new token's k/v goes to
    block_tables: list[list[int]]  # per request: its KV pages, in order
    block_size: int
    # Per request: its id, under which a backend may keep per-request state across steps
    # (XQA's page table keeps each request's pages on the device). Empty: not known.
    owners: list[str] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.slot_mapping)


# `EngineConfig.kv_cache_dtype` → the cache's storage dtype (None: the model's own).
KV_CACHE_DTYPES = {"auto": None, "fp8": torch.float8_e4m3fn}
_FP8_MAX = 448.0  # float8_e4m3fn's largest finite value


def kv_storage_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    return KV_CACHE_DTYPES[name] or model_dtype


def store_kv(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """Write the step's new k or v rows into `cache` at `slots`, cast to its dtype. An fp8
    cache saturates at its range (a plain cast would turn outliers into NaN); scale 1, as
    serving engines use when a checkpoint carries no calibrated KV scales."""
    if cache.dtype != torch.float8_e4m3fn:
        cache.index_copy_(0, slots, x.to(cache.dtype))
        return
    # torch has no index_copy for float8: copy its bytes.
    cache.view(torch.uint8).index_copy_(0, slots, _saturated(x, cache.dtype).view(torch.uint8))


def _saturated(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast to float8, clamped to its range first (the cast alone would make NaN)."""
    return x.clamp(-_FP8_MAX, _FP8_MAX).to(dtype)


def store_kv_pair(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """A layer's k and v writes (store_kv). Into fp8 caches on a GPU as one compiled kernel:
    eager, each is a clamp, a cast and a byte-wise index_copy, six ~2-µs kernels a layer that
    were ~0.30 ms of a 272-row Orpheus decode step on an H200, where one kernel a layer took
    0.05 (bench/kv_write.py, the same bytes written)."""
    if k_cache.dtype == torch.float8_e4m3fn and k_cache.is_cuda:
        _fused_fp8_store()(k_cache, v_cache, slots, k, v)
    else:
        _store_pair_eager(k_cache, v_cache, slots, k, v)


def _store_pair_eager(k_cache, v_cache, slots, k, v) -> None:
    store_kv(k_cache, slots, k)
    store_kv(v_cache, slots, v)


def _store_fp8_pair(k_cache, v_cache, slots, k, v) -> None:
    """What the compiler fuses: both saturating casts and both scatters (index_put_ stays in
    place under torch.compile, and float8 is only bytes to its kernel)."""
    k_cache[slots] = _saturated(k, k_cache.dtype)
    v_cache[slots] = _saturated(v, v_cache.dtype)


@functools.cache
def _fused_fp8_store() -> CompiledOrEager:
    """One program for every layer and row count (dynamic shapes), compiled on first use:
    the warm-up before a capture, never inside one."""
    return CompiledOrEager(
        torch.compile(_store_fp8_pair, fullgraph=True, dynamic=True),
        _store_pair_eager,
        "the fp8 KV cache's fused write",
        ": six kernels a layer where one would do",
    )


def gather_kv(cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows `slots` of a k or v cache, in `dtype` (float8 rows are gathered as bytes)."""
    if cache.dtype != torch.float8_e4m3fn:
        return cache[slots].to(dtype)
    return cache.view(torch.uint8)[slots].view(cache.dtype).to(dtype)


class KVCache:
    """One k and one v tensor per layer: [(num_blocks + 1) * block_size, kv_heads, head_dim].

    The extra last block is scratch: padded rows of a captured CUDA graph write their k/v
    there, so padding never touches a live request's pages. The block manager never hands it
    out. `dtype` is the storage (the model's, or fp8 to halve the bytes every decode step
    reads); `compute_dtype` the model's, in which queries and attention outputs stay."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        shape = ((num_blocks + 1) * block_size, num_kv_heads, head_dim)
        self.compute_dtype = compute_dtype or dtype
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.scratch_block = num_blocks
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_block(
        num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * block_size * num_kv_heads * head_dim * itemsize


class AttentionBackend(abc.ABC):
    name: str

    def __init__(self, cache: KVCache) -> None:
        self.cache = cache

    supports_graphs = False

    @abc.abstractmethod
    def prepare(self, layout: StepLayout, graph_batch: int | None = None) -> None:
        """Once per step, before the forward: turn the layout into device-side metadata.
        `graph_batch`: the layout is a decode step padded to this captured batch size."""

    @abc.abstractmethod
    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D] for the step's new tokens → out [T, Hq, D]."""

    def release(self, owner: str) -> None:  # noqa: B027 - optional hook
        """The request `owner` (a `StepLayout.owners` id) has ended: forget what was kept
        for it across steps. Called while a step that read it may still run on the device."""


class SdpaBackend(AttentionBackend):
    name = "sdpa"

    def prepare(self, layout: StepLayout, graph_batch: int | None = None) -> None:
        device = self.cache.k[0].device
        self._slots = upload(layout.slot_mapping, torch.long, device)
        within = torch.arange(layout.block_size, device=device)
        self._context = []  # per request: cache slots of its whole context, in order
        for table, ctx_len in zip(layout.block_tables, layout.context_lens, strict=True):
            pages = upload(table, torch.long, device)
            slots = (pages[:, None] * layout.block_size + within[None, :]).flatten()
            self._context.append(slots[:ctx_len])
        self._query_lens = layout.query_lens
        self._masks: list[torch.Tensor | None] = []
        for q_len, ctx_len in zip(layout.query_lens, layout.context_lens, strict=True):
            if q_len == 1:
                self._masks.append(None)  # a single newest query sees the whole context
                continue
            q_pos = torch.arange(ctx_len - q_len, ctx_len, device=device)
            k_pos = torch.arange(ctx_len, device=device)
            self._masks.append(k_pos[None, :] <= q_pos[:, None])  # [q_len, ctx_len]

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        k_cache, v_cache = self.cache.k[layer], self.cache.v[layer]
        store_kv_pair(k_cache, v_cache, self._slots, k, v)
        out = torch.empty_like(q)
        start = 0
        for q_len, ctx, mask in zip(self._query_lens, self._context, self._masks, strict=True):
            qi = q[start : start + q_len].transpose(0, 1)[None]  # [1, Hq, q_len, D]
            ki = gather_kv(k_cache, ctx, q.dtype).transpose(0, 1)[None]  # [1, Hkv, ctx_len, D]
            vi = gather_kv(v_cache, ctx, q.dtype).transpose(0, 1)[None]
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=True)
            out[start : start + q_len] = oi[0].transpose(0, 1)
            start += q_len
        return out
