"""A compact Llama decoder on the engine's paged KV cache, loading HF Llama weights by name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError
from models.layers.fused_kernels import FlashInferLlamaKernels, fused_kernels_available
from models.layers.rope import RopeSpec, Rotary, apply_rotary


@dataclass(frozen=True)
class LlamaArgs:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeSpec
    tie_word_embeddings: bool
    max_positions: int
    # Qwen2 puts biases on q/k/v (not on o_proj); Llama has none.
    attention_bias: bool = False
    # Qwen3: an RMSNorm over each head's q and k (`q_norm`, `k_norm`) before RoPE.
    qk_norm: bool = False

    @classmethod
    def from_hf_config(cls, cfg: dict) -> LlamaArgs:
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            return cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_layers=int(cfg["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
                rope=RopeSpec.from_hf_config(cfg),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                max_positions=int(cfg.get("max_position_embeddings", 8192)),
                attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            )
        except KeyError as missing:
            raise CheckpointError(f"config.json lacks the Llama field {missing}") from None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and x.device.type == "cpu":
            # One call instead of six, bit-identical in float32 on the CPU (checked against the
            # lines below in tests/models/test_llama_layers.py): a CPU step of a small model
            # pays ~10 µs of dispatch per op, and its depth stage runs two norms a codebook.
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Normalise in float32 as the reference does, then cast back.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.h, self.kvh, self.d = args.num_heads, args.num_kv_heads, args.head_dim
        self.qkv_proj = nn.Linear(
            args.hidden_size, (self.h + 2 * self.kvh) * self.d, bias=args.attention_bias
        )
        self.o_proj = nn.Linear(self.h * self.d, args.hidden_size, bias=False)
        self.interleaved_rope = args.rope.interleaved
        if args.qk_norm:
            self.q_norm = RMSNorm(self.d, args.rms_norm_eps)
            self.k_norm = RMSNorm(self.d, args.rms_norm_eps)
        self.qk_norm = args.qk_norm

    def _normed(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [T, H, D], k [T, Hkv, D] after the per-head norms of Qwen3-style attention."""
        if not self.qk_norm:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split(
            [self.h * self.d, self.kvh * self.d, self.kvh * self.d], -1
        )
        q, k = self._normed(q.view(t, self.h, self.d), k.view(t, self.kvh, self.d))
        q = apply_rotary(q, cos, sin, self.interleaved_rope)
        k = apply_rotary(k, cos, sin, self.interleaved_rope)
        out = attn.forward(self.layer, q, k, v.view(t, self.kvh, self.d))
        return self.o_proj(out.reshape(t, self.h * self.d))

    def forward_fused(
        self, x: torch.Tensor, positions: torch.Tensor, kernels, attn
    ) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split(
            [self.h * self.d, self.kvh * self.d, self.kvh * self.d], -1
        )
        if self.qk_norm:
            q = kernels.head_rmsnorm(q, self.q_norm.weight, self.q_norm.eps)
            k = kernels.head_rmsnorm(k, self.k_norm.weight, self.k_norm.eps)
        kernels.rope_(q, k, positions)
        out = attn.forward(
            self.layer,
            q.view(t, self.h, self.d),
            k.view(t, self.kvh, self.d),
            v.view(t, self.kvh, self.d),
        )
        return self.o_proj(out.reshape(t, self.h * self.d))


class MLP(nn.Module):
    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, layer)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_fused(
        self, h: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor, kernels, attn
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same block with the residual carried apart (vLLM's layout), so that each residual
        add fuses into the RMSNorm after it. Returns (this block's output, residual before it)."""
        eps = self.input_layernorm.eps
        if residual is None:
            residual, h = h, kernels.rmsnorm(h, self.input_layernorm.weight, eps)
        else:
            h, residual = kernels.add_rmsnorm(h, residual, self.input_layernorm.weight, eps)
        h = self.self_attn.forward_fused(h, positions, kernels, attn)
        h, residual = kernels.add_rmsnorm(h, residual, self.post_attention_layernorm.weight, eps)
        mlp = self.mlp
        return mlp.down_proj(kernels.silu_mul(mlp.gate_up_proj(h))), residual


def run_decoder_stack(
    x: torch.Tensor,
    positions: torch.Tensor,
    layers: Iterable[DecoderLayer],
    rotary: Rotary,
    norm: RMSNorm,
    attn,
    kernels: FlashInferLlamaKernels | None = None,
) -> torch.Tensor:
    """Embedded tokens x [T, H] at `positions` [T] through Llama blocks and the final norm: the
    backbone of every family built from these blocks (Orpheus, CSM, Moshi, voxgate-tiny,
    Qwen3-TTS). With `kernels` (fused_kernels_for), the blocks' fused form: the residual
    carried apart and added inside each norm (x itself is left as it is)."""
    if kernels is not None:
        h, residual = x.clone(), None  # the residual stream is updated in place
        for layer in layers:
            h, residual = layer.forward_fused(h, residual, positions, kernels, attn)
        h, _ = kernels.add_rmsnorm(h, residual, norm.weight, norm.eps)
        return h
    cos, sin = rotary.cos_sin(positions, x.dtype)
    for layer in layers:
        x = layer(x, cos, sin, attn)
    return norm(x)


def fused_kernels_for(
    args: LlamaArgs, rotary: Rotary, weight: torch.Tensor
) -> FlashInferLlamaKernels | None:
    """FlashInfer's fused norm/RoPE/activation kernels for a stack of these blocks whose
    weights are like `weight`, where they apply (CUDA, bf16/fp16, the `gpu` extra installed,
    Llama's RoPE layout); None elsewhere (the plain blocks)."""
    if not args.rope.is_llama_layout:  # the fused RoPE kernel is set up for Llama's
        return None
    if not fused_kernels_available(weight.device, weight.dtype):
        return None
    return FlashInferLlamaKernels(rotary, args.max_positions, args.head_dim, weight.device)


# HF checkpoint names that we store fused: (our parameter, shard index within it).
_FUSED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}


class LlamaForCausalLM(nn.Module):
    """Parameter names follow HF's `LlamaForCausalLM` except for the fused projections."""

    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.lm_head = (
            None
            if args.tie_word_embeddings
            else nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        )
        self.kernels = None  # FlashInferLlamaKernels once use_fused_kernels() ran

    def use_fused_kernels(self) -> bool:
        """Switch to FlashInfer's fused norm/RoPE/activation kernels where they apply (CUDA,
        bf16/fp16, `gpu` extra installed); returns whether it did."""
        self.kernels = fused_kernels_for(self.args, self.rotary, self.embed_tokens.weight)
        return self.kernels is not None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """input_ids, positions: [T] → hidden [T, H] (after the final norm)."""
        return self.forward_embeddings(self.embed_tokens(input_ids), positions, attn)

    def forward_embeddings(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """x [T, H] already embedded (models that mix text and audio embeddings) → hidden [T, H]."""
        return run_decoder_stack(
            x, positions, self.layers, self.rotary, self.norm, attn, self.kernels
        )

    def compute_logits(
        self, hidden: torch.Tensor, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """hidden [N, H] → float32 logits [N, V], or [N, len(rows)] for just those vocabulary rows."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        if rows is None:
            return F.linear(hidden, weight).float()
        return F.linear(hidden, self._head_rows(weight, rows))[:, : rows.numel()].float()

    def _head_rows(self, weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        # The sub-matrix is cached: gathering it every step would cost more than it saves. It
        # is padded with zero rows to a multiple of 64: an output row of an odd width (Orpheus:
        # 28,673) is not 16-byte aligned, and cuBLAS then falls back to a kernel ~5x slower.
        key = (id(rows), weight.data_ptr(), weight._version)
        cached = getattr(self, "_head_cache", None)
        if cached is None or cached[0] != key:
            n = rows.numel()
            padded = weight.new_zeros(-(-n // 64) * 64, weight.shape[1])
            padded[:n] = weight.index_select(0, rows)
            self._head_cache = (key, padded)
        return self._head_cache[1]

    # --- loading ---------------------------------------------------------------------------------
    def _split_sizes(self, fused: str) -> list[int]:
        a = self.args
        if fused == "qkv_proj":
            return [
                a.num_heads * a.head_dim,
                a.num_kv_heads * a.head_dim,
                a.num_kv_heads * a.head_dim,
            ]
        return [a.intermediate_size, a.intermediate_size]

    def load_hf_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF Llama tensors in by name; raise CheckpointError naming anything missing,
        unexpected or of the wrong shape."""
        params = dict(self.named_parameters())
        expected: set[str] = set()
        for name in params:
            module, _, leaf = name.rpartition(".")
            stem, _, kind = module.rpartition(".")
            if kind in ("qkv_proj", "gate_up_proj"):
                parts = (
                    ["q_proj", "k_proj", "v_proj"]
                    if kind == "qkv_proj"
                    else ["gate_proj", "up_proj"]
                )
                expected.update(f"model.{stem}.{p}.{leaf}" for p in parts)
            elif name == "lm_head.weight":
                expected.add(name)
            else:
                expected.add(f"model.{name}")
        seen: set[str] = set()
        with torch.no_grad():
            for hf_name, tensor in weights:
                if hf_name not in expected:
                    if hf_name == "lm_head.weight" and self.lm_head is None:
                        continue  # some tied checkpoints still store the head; it equals the embedding
                    if hf_name.endswith("rotary_emb.inv_freq"):
                        continue
                    raise CheckpointError(f"unexpected tensor {hf_name!r} in the checkpoint")
                self._copy_in(params, hf_name, tensor)
                seen.add(hf_name)
        missing = sorted(expected - seen)
        if missing:
            shown = ", ".join(missing[:5]) + (
                f" … ({len(missing)} in all)" if len(missing) > 5 else ""
            )
            raise CheckpointError(f"checkpoint is missing tensors: {shown}")

    def _copy_in(self, params: dict[str, nn.Parameter], hf_name: str, tensor: torch.Tensor) -> None:
        name = hf_name.removeprefix("model.")
        module, _, leaf = name.rpartition(".")
        stem, _, kind = module.rpartition(".")
        if kind in _FUSED:
            fused, index = _FUSED[kind]
            target = params[f"{stem}.{fused}.{leaf}"]
            sizes = self._split_sizes(fused)
            offset = sum(sizes[:index])
            target = target.narrow(0, offset, sizes[index])
        else:
            target = params[name]
        if tuple(target.shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"tensor {hf_name!r} has shape {tuple(tensor.shape)}, the config implies "
                f"{tuple(target.shape)}: checkpoint and config.json do not match"
            )
        target.copy_(tensor)


def hf_layer_targets(
    layers: nn.ModuleList, args: LlamaArgs, prefix: str
) -> dict[str, torch.Tensor]:
    """For models that embed Llama decoder layers under other names (CSM's backbone and depth
    decoder): each HF tensor name `{prefix}{i}.self_attn.q_proj.weight` … → the part of our
    (fused) parameter it fills, to be copied into with a shape check."""
    q, kv = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
    splits = {"qkv_proj": [q, kv, kv], "gate_up_proj": [args.intermediate_size] * 2}
    targets: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(layers):
        for name, param in layer.named_parameters():
            module, _, leaf = name.rpartition(".")
            stem, _, kind = module.rpartition(".")
            if kind not in splits:
                targets[f"{prefix}{i}.{name}"] = param
                continue
            parts = [hf for hf, (fused, _) in _FUSED.items() if fused == kind]
            offset = 0
            for part, size in zip(parts, splits[kind], strict=True):
                targets[f"{prefix}{i}.{stem}.{part}.{leaf}"] = param.narrow(0, offset, size)
                offset += size
    return targets
