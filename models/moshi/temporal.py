"""Moshi's temporal transformer on the engine's paged KV cache.

Each position's input is a row of 17 ids — the text token, Moshi's 8 audio codes and the user's
8 audio codes (see `rows.py` for the layout and delays) — embedded as the sum of 17 embeddings.
The layers are Llama-shaped (RMSNorm, rotary attention without biases, a SiLU-gated MLP whose
`fc1` holds gate and up halves in that order), so `models/layers/llama.py` runs them; only the
tensor names differ from Llama's, mapped in `hf_targets`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.layers.llama import (
    DecoderLayer,
    LlamaArgs,
    RMSNorm,
    hf_layer_targets,
    run_decoder_stack,
)
from models.layers.rope import Rotary


def llama_args(cfg: dict) -> LlamaArgs:
    """MoshiConfig (or MoshiDepthConfig) → the Llama shape it shares: `ffn_dim` is the gated
    MLP's two halves together."""
    return LlamaArgs.from_hf_config({**cfg, "intermediate_size": int(cfg["ffn_dim"]) // 2})


def moshi_layer_targets(layers: nn.ModuleList, args: LlamaArgs, prefix: str) -> dict:
    """transformers' Moshi names for Llama decoder layers: projections sit in a `.linear`
    wrapper, and the MLP is `fc1` (gate ‖ up, our fused gate_up_proj as is) and `fc2`."""
    targets = {}
    for name, tensor in hf_layer_targets(layers, args, prefix).items():
        if ".mlp.gate_proj." in name or ".mlp.up_proj." in name:
            continue
        name = name.replace(".mlp.down_proj.", ".mlp.fc2.")
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            name = name.replace(f".self_attn.{proj}.weight", f".self_attn.{proj}.linear.weight")
        targets[name] = tensor
    for i, layer in enumerate(layers):
        targets[f"{prefix}{i}.mlp.fc1.weight"] = layer.mlp.gate_up_proj.weight
    return targets


class MoshiTemporal(nn.Module):
    def __init__(
        self, args: LlamaArgs, text_vocab: int, audio_vocab: int, num_streams: int
    ) -> None:
        super().__init__()
        self.args = args
        self.num_streams = num_streams  # 16: Moshi's 8 codebooks, then the user's 8
        # One extra id per table: the initial token (text_vocab, audio_vocab) before any frame.
        self.embed_text = nn.Embedding(text_vocab + 1, args.hidden_size)
        self.embed_audio = nn.Embedding(num_streams * (audio_vocab + 1), args.hidden_size)
        self.register_buffer(
            "offsets", torch.arange(num_streams) * (audio_vocab + 1), persistent=False
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.text_head = nn.Linear(args.hidden_size, text_vocab, bias=False)
        self._audio_vocab = audio_vocab

    def embed(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [T, 1 + num_streams] → [T, H]: text embedding plus every stream's code's."""
        audio = self.embed_audio(rows[:, 1:] + self.offsets).sum(dim=1)  # [T, H]
        return self.embed_text(rows[:, 0]) + audio

    def forward(self, rows: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """rows [T, 17], positions [T] → hidden [T, H] after the final norm."""
        return run_decoder_stack(
            self.embed(rows), positions, self.layers, self.rotary, self.norm, attn
        )

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] → text logits [N, text_vocab] (float32)."""
        return F.linear(hidden, self.text_head.weight).float()

    def hf_targets(self) -> dict[str, torch.Tensor]:
        targets = moshi_layer_targets(self.layers, self.args, "decoder.model.layers.")
        targets.update(
            {
                "decoder.model.embed_tokens.weight": self.embed_text.weight,
                "decoder.model.norm.weight": self.norm.weight,
                "decoder.lm_head.weight": self.text_head.weight,
            }
        )
        rows = self._audio_vocab + 1
        for k in range(self.num_streams):
            targets[f"embed_tokens.{k}.weight"] = self.embed_audio.weight[k * rows : (k + 1) * rows]
        return targets
