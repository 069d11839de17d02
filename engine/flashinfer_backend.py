"""FlashInfer paged attention (NVIDIA GPUs; the optional `gpu` extra).

Planning (index arithmetic, work partitioning) happens in `prepare`, on the host, outside any
captured CUDA graph; `forward` only launches kernels reading fixed buffers, so decode steps
can be captured once per batch bucket and replayed.
"""

from __future__ import annotations

import torch

from engine.attention import AttentionBackend, KVCache, StepLayout, store_kv_pair
from models.device_util import StagingRing

WORKSPACE_BYTES = 256 * 2**20
HEAD_DIMS = (64, 128, 256)  # what FlashInfer's paged kernels are built for
DTYPES = (torch.bfloat16, torch.float16)  # what they compute in (float32 serving runs on sdpa)


class FlashInferBackend(AttentionBackend):
    name = "flashinfer"
    supports_graphs = True

    def __init__(
        self,
        cache: KVCache,
        num_q_heads: int,
        max_tokens: int = 16384,
        max_batch: int = 512,
        max_context: int = 8192,
    ) -> None:
        if cache.head_dim not in HEAD_DIMS:
            raise ValueError(
                f"FlashInfer supports head_dim {HEAD_DIMS}, this model has {cache.head_dim}; "
                "use --attention sdpa"
            )
        if cache.compute_dtype not in DTYPES:
            raise ValueError(
                f"FlashInfer runs in bfloat16 or float16, this engine in {cache.compute_dtype}; "
                "serve with --dtype bfloat16, or --attention sdpa"
            )
        import flashinfer  # imported here only: CPU installs never need it

        super().__init__(cache)
        self._fi = flashinfer
        self.num_q_heads = num_q_heads
        device = cache.k[0].device
        self.device = device
        self._workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self._prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self._workspace, "NHD")
        self._decode = self._new_decode_wrapper(None)
        self._graph_decoders: dict[int, object] = {}
        self._slots = torch.zeros(max_tokens, dtype=torch.long, device=device)
        self._slots_staging = StagingRing(max_tokens, torch.long, device)
        self._active = self._decode
        self._pages_view = cache.num_blocks + 1
        # fp8 pages: decode steps run XQA's kernel, which reads them at the bandwidth floor
        # (engine/xqa_decode.py); steps with prefill stay on FlashInfer's prefill kernel.
        self._xqa = None
        if cache.k[0].dtype == torch.float8_e4m3fn:
            from engine.xqa_decode import XqaDecode

            self._xqa = XqaDecode(cache, max_batch, max_context)

    def _new_decode_wrapper(self, batch: int | None):
        # Tensor-core decode pays off for grouped-query heads (Orpheus: 3 queries per kv head).
        tensor_cores = self.num_q_heads // self.cache.num_kv_heads >= 2
        if batch is None:
            return self._fi.BatchDecodeWithPagedKVCacheWrapper(
                self._workspace, "NHD", use_tensor_cores=tensor_cores
            )
        max_pages = self.cache.num_blocks + 1
        return self._fi.BatchDecodeWithPagedKVCacheWrapper(
            self._workspace,
            "NHD",
            use_cuda_graph=True,
            use_tensor_cores=tensor_cores,
            paged_kv_indptr_buffer=torch.zeros(batch + 1, dtype=torch.int32, device=self.device),
            paged_kv_indices_buffer=torch.zeros(max_pages, dtype=torch.int32, device=self.device),
            paged_kv_last_page_len_buffer=torch.zeros(batch, dtype=torch.int32, device=self.device),
        )

    def _csr(self, layout: StepLayout, rows: int):
        """Page tables in FlashInfer's CSR form, padded to `rows` with the scratch page."""
        bs = layout.block_size
        indptr, indices, last = [0], [], []
        for table, ctx in zip(layout.block_tables, layout.context_lens, strict=True):
            pages = -(-ctx // bs)
            indices.extend(table[:pages])
            indptr.append(len(indices))
            last.append(ctx - (pages - 1) * bs)
        for _ in range(rows - len(layout.block_tables)):
            indices.append(self.cache.scratch_block)
            indptr.append(len(indices))
            last.append(1)
        as_i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731 - host tensors for plan
        return as_i32(indptr), as_i32(indices), as_i32(last)

    def prepare(self, layout: StepLayout, graph_batch: int | None = None) -> None:
        decode_only = all(n == 1 for n in layout.query_lens)
        rows = graph_batch or len(layout.query_lens)
        n = layout.num_tokens
        tokens = n + rows - len(layout.query_lens)  # padding rows write to the scratch page
        with self._slots_staging.fill(self._slots[:tokens]) as slots:
            slots[:n] = layout.slot_mapping
            slots[n:] = self.cache.scratch_block * layout.block_size
        if decode_only and self._xqa is not None:
            self._xqa.prepare(layout, rows)
            self._active = self._xqa
            return
        indptr, indices, last = self._csr(layout, rows)
        q_dtype, kv_dtype = self.cache.compute_dtype, self.cache.k[0].dtype
        # The paged KV's layout, as both wrappers' plan() take it. Host tensors: plan() reads
        # them on the CPU anyway, and device ones would sync.
        paged = (
            indptr, indices, last, self.num_q_heads, self.cache.num_kv_heads,
            self.cache.head_dim, layout.block_size,
        )  # fmt: skip
        if decode_only:
            if graph_batch is not None:
                wrapper = self._graph_decoders.get(graph_batch)
                if wrapper is None:
                    wrapper = self._graph_decoders[graph_batch] = self._new_decode_wrapper(
                        graph_batch
                    )
            else:
                wrapper = self._decode
            wrapper.plan(*paged, q_data_type=q_dtype, kv_data_type=kv_dtype)
        else:
            if graph_batch is not None:
                raise ValueError("only decode steps are captured in CUDA graphs")
            qo = [0]
            for n in layout.query_lens:
                qo.append(qo[-1] + n)
            wrapper = self._prefill
            qo_indptr = torch.tensor(qo, dtype=torch.int32)
            wrapper.plan(qo_indptr, *paged, causal=True, q_data_type=q_dtype, kv_data_type=kv_dtype)
        self._active = wrapper

    def release(self, owner: str) -> None:
        if self._xqa is not None:
            self._xqa.release(owner)

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        slots = self._slots[: q.shape[0]]
        k_cache, v_cache = self.cache.k[layer], self.cache.v[layer]
        store_kv_pair(k_cache, v_cache, slots, k, v)
        bs = self.cache.block_size
        paged = (
            k_cache.view(self._pages_view, bs, self.cache.num_kv_heads, self.cache.head_dim),
            v_cache.view(self._pages_view, bs, self.cache.num_kv_heads, self.cache.head_dim),
        )
        return self._active.run(q.contiguous(), paged)
