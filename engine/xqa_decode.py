"""Decode attention over an fp8 KV cache with XQA (TensorRT-LLM's decode kernels, shipped in
FlashInfer). Used by the FlashInfer backend for decode-only steps when the cache is fp8.

Why: a long stream's decode step is bound by reading its KV, so fp8 pages should halve
attention. FlashInfer's own decode kernels dequantise fp8 pages on the way in and lose that
(Orpheus' shape on an H200, batch 128 at context 2,500: 284 µs a layer with fp8 pages against
332 in bf16); XQA's Hopper kernel for fp8 pages stays at the bandwidth floor (167 µs, 92 % of
the measured copy bandwidth). `bench/attention_kernels.py` measures all four.

XQA takes a dense page table, [batch, pages per sequence], instead of FlashInfer's CSR form.
It lives in one device buffer sized for the engine's largest batch and the longest context
the model allows, so captured CUDA graphs always read the same memory; each step writes only
the columns its requests use (the kernel reads no page past a row's length), from pinned host
buffers (models/device_util.StagingRing). Padding rows of a graph bucket attend to one token
of the scratch page.
"""

from __future__ import annotations

import math

import torch

from engine.attention import KVCache, StepLayout
from engine.request import ConfigError
from models.device_util import StagingRing

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
        self.max_batch = max_batch
        self.page_table = torch.full(
            (max_batch, self.width), cache.scratch_block, dtype=torch.int32, device=device
        )
        self.seq_lens = torch.ones(max_batch, dtype=torch.int32, device=device)
        self._table_staging = StagingRing(max_batch * self.width, torch.int32, device)
        self._lens_staging = StagingRing(max_batch, torch.int32, device)
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.scale = cache.head_dim**-0.5
        self.rows = 0

    def prepare(self, layout: StepLayout, rows: int) -> None:
        """Write the step's page table and lengths (`rows` ≥ its requests: a graph bucket)."""
        if rows > self.max_batch:
            raise ValueError(
                f"a decode step of {rows} rows exceeds the {self.max_batch} the XQA page table "
                "was sized for (max_num_seqs)"
            )
        bs = layout.block_size
        pages = [-(-ctx // bs) for ctx in layout.context_lens]
        used = max(pages, default=1)
        if used > self.width:
            raise ValueError(
                f"a context of {max(layout.context_lens)} tokens exceeds the model's "
                f"{self.width * bs}-token limit the XQA page table was sized for"
            )
        with self._table_staging.fill(self.page_table[:rows, :used]) as table:
            table[...] = self.cache.scratch_block
            for row, (blocks, n) in enumerate(zip(layout.block_tables, pages, strict=True)):
                table[row, :n] = blocks[:n]
        with self._lens_staging.fill(self.seq_lens[:rows]) as lens:
            lens[...] = 1
            lens[: len(layout.context_lens)] = layout.context_lens
        self.rows = rows

    def run(self, q: torch.Tensor, paged: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """q: [rows, Hq, D] in the model's dtype; paged: (k, v) as [pages, page, Hkv, D]."""
        return self._kernel(
            q,
            paged,
            self.workspace,
            self.page_table[: self.rows],
            self.seq_lens[: self.rows],
            self.width * self.cache.block_size,
            bmm1_scale=self.scale,
            bmm2_scale=1.0,
        )
