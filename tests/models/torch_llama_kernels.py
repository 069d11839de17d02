"""The fused Llama kernels' contract (models/layers/fused_kernels.py, FlashInferLlamaKernels) in
plain torch, float32 on the CPU: with it, a model's fused block path (the residual carried
apart and added inside each norm, per-head norms and RoPE on the projection's views, SiLU·mul)
runs where FlashInfer cannot, so its wiring is checked against the plain blocks in CI. The
kernels themselves are checked on a GPU (tests/gpu)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from models.csm.depth import FrameAttention
from models.layers.llama import LlamaArgs, LlamaForCausalLM
from models.layers.rope import RopeSpec, Rotary, apply_rotary


class TorchLlamaKernels:
    def __init__(self, rotary: Rotary, head_dim: int) -> None:
        self.rotary = rotary
        self.head_dim = head_dim

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return F.rms_norm(x, weight.shape, weight, eps)

    def add_rmsnorm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        residual += x  # in place, as FlashInfer's fused_add_rmsnorm
        x.copy_(self.rmsnorm(residual, weight, eps))
        return x, residual

    def head_rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        t = x.shape[0]
        return self.rmsnorm(x.reshape(-1, self.head_dim), weight, eps).view(t, -1)

    def rope_(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> None:
        cos, sin = self.rotary.cos_sin(positions, q.dtype)
        for x in (q, k):
            heads = x.view(x.shape[0], -1, self.head_dim)
            heads.copy_(apply_rotary(heads, cos, sin))

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


# The block kinds the fused path serves: Llama's, Qwen2's (q/k/v biases: CosyVoice 2's and
# Step-Audio 2's LLMs) and Qwen3's (per-head q/k norms: Qwen3-TTS): (attention_bias, qk_norm).
BLOCK_KINDS = {"llama": (False, False), "qwen2": (True, False), "qwen3": (False, True)}


def random_stack(kind: str, head_dim: int, scale: float) -> LlamaForCausalLM:
    """A 2-layer stack of `kind`'s blocks with every weight drawn N(0, scale) (the norms'
    too, so that each norm's weight counts), float32 on the CPU."""
    attention_bias, qk_norm = BLOCK_KINDS[kind]
    args = LlamaArgs(
        vocab_size=500,
        hidden_size=4 * head_dim,
        intermediate_size=6 * head_dim,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=head_dim,
        rms_norm_eps=1e-6,
        rope=RopeSpec(theta=10000.0),
        tie_word_embeddings=True,
        max_positions=256,
        attention_bias=attention_bias,
        qk_norm=qk_norm,
    )
    torch.manual_seed(0)
    llm = LlamaForCausalLM(args).eval()
    with torch.no_grad():
        for p in llm.parameters():
            p.normal_(0.0, scale)
    return llm


def causal_hidden(llm: LlamaForCausalLM, ids: torch.Tensor, start: int) -> torch.Tensor:
    """The stack's hidden states [T, H] for `ids` at positions start.. of one sequence, over a
    dense causal attention (the depth stages' FrameAttention), as it is switched (plain or
    fused)."""
    a, t = llm.args, ids.shape[0]
    dtype = llm.embed_tokens.weight.dtype
    attn = FrameAttention(a.num_layers, start + t, a.num_kv_heads, a.head_dim)
    attn.begin(1, ids.device, dtype)
    attn.at(start, t)
    positions = torch.arange(start, start + t, device=ids.device)
    with torch.inference_mode():
        return llm(ids, positions, attn).float()


@contextmanager
def fused_with(owner, attr: str, kernels) -> Iterator[None]:
    """`owner.<attr>` set to `kernels` (None: the plain blocks) for the block, in inference
    mode, and back to None after it, so a test runs one model plain and fused in turn."""
    setattr(owner, attr, kernels)
    try:
        with torch.inference_mode():
            yield
    finally:
        setattr(owner, attr, None)
