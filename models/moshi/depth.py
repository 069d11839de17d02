"""Moshi's depth transformer, stepped once per codebook for the whole batch.

For one frame it sees the temporal transformer's hidden state and, at position 0, the frame's
text token; at position i ≥ 1 the code drawn for codebook i-1. Position i predicts codebook i.
Unlike CSM's depth decoder, every position has weights of its own (transformers'
`MoshiFlexibleLinear`: input projection, q/k/v/o, both MLP matrices and the head are stacked
[num_codebooks, out, in]), and there is no rotary embedding and no final norm. The frame's
k/v live in a dense per-step buffer (`FrameAttention` from CSM's depth stage): 8 positions that
never outlive the step, so paging buys nothing and every shape stays fixed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.base import CodeSampler
from models.csm.depth import FrameAttention
from models.layers.llama import RMSNorm


class _Layer(nn.Module):
    def __init__(
        self, k: int, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int, eps: float
    ):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.q = nn.Parameter(torch.empty(k, heads * head_dim, hidden))
        self.k = nn.Parameter(torch.empty(k, kv_heads * head_dim, hidden))
        self.v = nn.Parameter(torch.empty(k, kv_heads * head_dim, hidden))
        self.o = nn.Parameter(torch.empty(k, hidden, heads * head_dim))
        self.fc1 = nn.Parameter(torch.empty(k, ffn, hidden))
        self.fc2 = nn.Parameter(torch.empty(k, hidden, ffn // 2))

    def forward(self, x: torch.Tensor, i: int, attn: FrameAttention, layer: int) -> torch.Tensor:
        """x [B, hidden] at position i → [B, hidden]."""
        b = x.shape[0]
        h = self.input_layernorm(x)
        q = F.linear(h, self.q[i]).view(b, self.heads, self.head_dim)
        k = F.linear(h, self.k[i]).view(b, self.kv_heads, self.head_dim)
        v = F.linear(h, self.v[i]).view(b, self.kv_heads, self.head_dim)
        x = x + F.linear(attn.forward(layer, q, k, v).reshape(b, -1), self.o[i])
        gate, up = F.linear(self.post_attention_layernorm(x), self.fc1[i]).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, self.fc2[i])


class MoshiDepth(nn.Module):
    def __init__(self, cfg: dict, temporal_hidden: int, text_vocab: int, audio_vocab: int) -> None:
        super().__init__()
        k = self.num_codebooks = int(cfg["num_codebooks"])
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        self.window = int(cfg.get("sliding_window") or k)
        self.audio_vocab = audio_vocab
        self.text_embed = nn.Embedding(text_vocab + 1, hidden)
        # Codebook i-1's embeddings feed position i; the last codebook is never an input.
        self.code_embeds = nn.ModuleList(
            nn.Embedding(audio_vocab + 1, hidden) for _ in range(k - 1)
        )
        self.input_projections = nn.Parameter(torch.empty(k, hidden, temporal_hidden))
        self.layers = nn.ModuleList(
            _Layer(
                k,
                hidden,
                heads,
                kv_heads,
                head_dim,
                int(cfg["ffn_dim"]),
                float(cfg["rms_norm_eps"]),
            )
            for _ in range(int(cfg["num_hidden_layers"]))
        )
        self.heads = nn.Parameter(torch.empty(k, audio_vocab, hidden))
        # Dense k/v of one frame; its SDPA scales by 1/sqrt(head_dim), as transformers' Moshi.
        self.attn = FrameAttention(len(self.layers), k, kv_heads, head_dim)

    def generate(
        self, hidden: torch.Tensor, text: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        """hidden [B, temporal_hidden], text [B] → codes [B, num_codebooks]; codebook i is drawn
        with `sample(logits, i + 1)` (index 0 is the engine's text column)."""
        b = hidden.shape[0]
        self.attn.begin(b, hidden.device, hidden.dtype)
        self._window_mask(hidden.device)
        x = self.text_embed(text)
        codes = []
        for i in range(self.num_codebooks):
            x = x + F.linear(hidden, self.input_projections[i])
            self.attn.at(i, 1)
            self.attn.mask = self._visible[i : i + 1]
            for n, layer in enumerate(self.layers):
                x = layer(x, i, self.attn, n)
            logits = F.linear(x, self.heads[i]).float()  # no final norm in Moshi's depth stage
            codes.append(sample(logits, i + 1))
            if i + 1 < self.num_codebooks:
                x = self.code_embeds[i](codes[-1])
        return torch.stack(codes, dim=1)

    def _window_mask(self, device: torch.device) -> None:
        pos = torch.arange(self.num_codebooks, device=device)
        delta = pos[:, None] - pos[None, :]
        self._visible = (delta >= 0) & (delta < self.window)  # [K, K]: query row, key column

    def hf_targets(self) -> dict[str, torch.Tensor]:
        p = "depth_decoder."
        targets = {
            f"{p}text_embed_tokens.weight": self.text_embed.weight,
            f"{p}input_projections.weight": self.input_projections,
            f"{p}lm_heads.weight": self.heads,
        }
        for i, emb in enumerate(self.code_embeds):
            targets[f"{p}embed_tokens.{i}.weight"] = emb.weight
        for n, layer in enumerate(self.layers):
            q = f"{p}layers.{n}."
            targets.update(
                {
                    f"{q}input_layernorm.weight": layer.input_layernorm.weight,
                    f"{q}post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
                    f"{q}self_attn.q_proj.linear.weight": layer.q,
                    f"{q}self_attn.k_proj.linear.weight": layer.k,
                    f"{q}self_attn.v_proj.linear.weight": layer.v,
                    f"{q}self_attn.o_proj.linear.weight": layer.o,
                    f"{q}mlp.fc1.weight": layer.fc1,
                    f"{q}mlp.fc2.weight": layer.fc2,
                }
            )
        return targets
