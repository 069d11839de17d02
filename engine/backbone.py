"""The paged LLM both engine loops step (engine/core.py, engine/duplex.py): the KV pool and its
block manager, the worker that runs the model on it, the CUDA stream its steps go on, and the
LLM's CUDA graphs."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch

from engine.attention import KVCache, kv_storage_dtype
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.llm_graphs import capture_llm_graphs
from engine.llm_stream import LlmStream
from engine.worker import Worker
from models.base import SpeechModel

log = logging.getLogger("voxgate.engine")


@dataclass(frozen=True)
class Backbone:
    blocks: BlockManager
    worker: Worker
    # The loop thread's device work (steps, admissions, warm-up) goes on this stream.
    on_llm_stream: LlmStream
    num_blocks: int
    kv_bytes_per_block: int  # one page of KV, all layers: what a decode step reads a page


def build_backbone(
    model: SpeechModel, config: EngineConfig, device: torch.device, attention: str
) -> Backbone:
    num_blocks = config.num_kv_blocks or size_kv_pool(model, config, device)
    shape = model.shape
    cache = KVCache(
        shape.num_layers,
        num_blocks,
        config.block_size,
        shape.num_kv_heads,
        shape.head_dim,
        kv_storage_dtype(config.kv_cache_dtype, shape.dtype),
        device,
        compute_dtype=shape.dtype,
    )
    blocks = BlockManager(num_blocks, config.block_size)
    if attention == "flashinfer" and config.fused_kernels and model.use_fused_kernels():
        log.info("backbone uses FlashInfer's fused norm/RoPE/activation kernels")
    worker = Worker(model, cache, attention, device, max_batch=config.max_num_seqs)
    on_llm_stream = LlmStream(device, config.llm_stream_priority)
    if device.type == "cuda" and config.cuda_graphs:
        capture_llm_graphs(worker, config)
    return Backbone(blocks, worker, on_llm_stream, num_blocks, kv_bytes_per_block(model, config))


def kv_bytes_per_block(model: SpeechModel, config: EngineConfig) -> int:
    s = model.shape
    return KVCache.bytes_per_block(
        s.num_layers,
        config.block_size,
        s.num_kv_heads,
        s.head_dim,
        kv_storage_dtype(config.kv_cache_dtype, s.dtype),
    )


def size_kv_pool(model: SpeechModel, config: EngineConfig, device: torch.device) -> int:
    per_block = kv_bytes_per_block(model, config)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what start-up freed (the codec's compile, its warm-up) is free
        free, _total = torch.cuda.mem_get_info(device)
        budget = int(free * config.kv_memory_fraction)
        if model.recurrent_state is not None:  # room for max_num_seqs requests' recurrent state
            budget -= model.recurrent_state.bytes_per_request * config.max_num_seqs
    else:
        budget = config.kv_cache_mb * 2**20
    return max(2, budget // per_block)


def on_llm_stream(method):
    """Run a loop's method with the LLM's stream current on the calling thread
    (engine/llm_stream.py): its device work then stays in order on that one stream. The loop
    keeps its LlmStream as `self.on_llm_stream`."""

    @functools.wraps(method)
    def on_stream(self, *args, **kwargs):
        with self.on_llm_stream():
            return method(self, *args, **kwargs)

    return on_stream
