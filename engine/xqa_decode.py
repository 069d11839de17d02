"""Decode attention over an fp8 KV cache with XQA (TensorRT-LLM's decode kernels, shipped in
FlashInfer). Used by the FlashInfer backend for decode-only steps when the cache is fp8.

Why: a long stream's decode step is bound by reading its KV, so fp8 pages should halve
attention. FlashInfer's own decode kernels dequantise fp8 pages on the way in and lose that
(Orpheus' shape on an H200, batch 128 at context 2,500: 284 µs a layer with fp8 pages against
332 in bf16); XQA's Hopper kernel for fp8 pages stays at the bandwidth floor (167 µs, 92 % of
the measured copy bandwidth). `bench/attention_kernels.py` measures all four.

XQA takes a dense page table, [batch, pages per sequence], instead of FlashInfer's CSR form;
engine/xqa_page_table.py writes it each step, from each request's pages kept on the device.
"""

from __future__ import annotations

import math

import torch

from engine.attention import KVCache, StepLayout
from engine.request import ConfigError
from engine.xqa_page_table import XqaPageTable

# XQA keeps semaphores in the first 8 MiB of its workspace and must find them zeroed first.
WORKSPACE_BYTES = 256 * 2**20
XQA_ARCHS = (9, 10, 12)  # compute capability majors XQA is built for


class XqaDecode:
    def __init__(self, cache: KVCache, max_batch: int, max_context: int) -> None:
        from flashinfer.decode import xqa_batch_decode_with_kv_cache  # optional GPU extra

        self._kernel = xqa_batch_decode_with_kv_cache
        self.cache = cache
        device = cache.k[0].device
        major, minor = torch.cuda.get_device_capability(device)
        if major not in XQA_ARCHS:
            raise ConfigError(
                f"--kv-cache-dtype fp8 decodes with XQA, which needs compute capability 9.x, "
                f"10.x or 12.x (Hopper, Blackwell); this GPU is {major}.{minor}: use "
                "--kv-cache-dtype auto"
            )
        self.width = min(math.ceil(max_context / cache.block_size), cache.num_blocks + 1)
        self.tables = XqaPageTable(max_batch, self.width, cache.scratch_block, device)
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.scale = cache.head_dim**-0.5
        self.rows = 0

    def prepare(self, layout: StepLayout, rows: int) -> None:
        """Write the step's page table and lengths (`rows` ≥ its requests: a graph bucket)."""
        self.tables.write(layout, rows)
        self.rows = rows

    def release(self, owner: str) -> None:
        self.tables.release(owner)

    def run(self, q: torch.Tensor, paged: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """q: [rows, Hq, D] in the model's dtype; paged: (k, v) as [pages, page, Hkv, D]."""
        return self._kernel(
            q,
            paged,
            self.workspace,
            self.tables.page_table[: self.rows],
            self.tables.seq_lens[: self.rows],
            self.width * self.cache.block_size,
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
        )
