"""T3's two classifier-free-guidance rows as one sequence on the paged KV cache.

The conditional and unconditional rows of a request have the same length and the same
positions; they differ only in their text embeddings. So the backbone runs them side by side
as 2T rows of the Llama blocks (each token's two rows at its position), and their attention
heads are stacked: the cache holds 2 x the KV heads (conditional ones first), query head i of
the stacked 2 x heads reads KV head i // (heads / kv_heads), which keeps each row's heads on
its own keys. One block table, one scheduling unit, one forward for both rows; the engine
sizes the cache from BackboneShape(num_kv_heads = 2 x kv_heads). The blocks are the shared
ones (models/layers/llama.py, run_decoder_stack), with FlashInfer's fused kernels where
ChatterboxModel.use_fused_kernels switched them on."""

from __future__ import annotations

import torch

from models.chatterbox.t3 import T3
from models.layers.fused_kernels import FlashInferLlamaKernels
from models.layers.llama import run_decoder_stack


class RowsAsHeads:
    """The attention backend as the blocks see it: 2T rows of H heads each, which the cache
    holds as T tokens of 2H stacked heads (row 2t + r's head j is token t's head rH + j)."""

    def __init__(self, attn) -> None:
        self.attn = attn

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        t, d = q.shape[0] // 2, q.shape[-1]
        out = self.attn.forward(
            layer, q.reshape(t, -1, d), k.reshape(t, -1, d), v.reshape(t, -1, d)
        )
        return out.reshape(2 * t, -1, d)


def guided_forward(
    model: T3,
    x: torch.Tensor,
    positions: torch.Tensor,
    attn,
    kernels: FlashInferLlamaKernels | None = None,
) -> torch.Tensor:
    """x [T, 2, H] (each token's conditional and unconditional embeddings) at rotary positions
    [T] → hidden [T, 2, H] after the final norm."""
    backbone = model.backbone
    t, width = x.shape[0], x.shape[-1]
    hidden = run_decoder_stack(
        x.reshape(2 * t, width),
        positions.repeat_interleave(2),
        backbone.layers,
        backbone.rotary,
        backbone.norm,
        RowsAsHeads(attn),
        kernels,
    )
    return hidden.view(t, 2, width)
