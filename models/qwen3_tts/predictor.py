"""Qwen3-TTS's multi-token predictor (the "code predictor"), stepped once per codebook for the
whole batch: the depth stage.

For each frame it sees the talker's last hidden state (position 0) and codebook 0's embedding
in the talker's codec table (position 1), then codebook i's embedding in its own table i-1
(position i+1); its head i-1 at position i predicts codebook i. Inputs pass through
`small_to_mtp_projection` when the predictor is narrower than the talker. Its context is one
frame, so its k/v live in CSM's dense per-frame buffer (models/csm/depth.py, FrameAttention).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.base import CodeSampler
from models.csm.depth import FrameAttention
from models.layers.llama import (
    DecoderLayer,
    RMSNorm,
    fused_kernels_for,
    hf_layer_targets,
    run_decoder_stack,
)
from models.layers.rope import Rotary
from models.qwen3_tts.talker import Talker, qwen3_args


class CodePredictor(nn.Module):
    def __init__(self, cfg: dict, talker: Talker) -> None:
        super().__init__()
        self.args = args = qwen3_args(cfg)
        self.num_codebooks = talker.num_codebooks
        self.vocab = args.vocab_size
        # The talker owns both embedding tables the predictor reads (codebook 0: the codec
        # table; codebooks 1..15: the stacked residual table), as the checkpoint does.
        self.talker_embed = talker.codec_embedding
        self.residual_embed = talker.residual_embedding
        width = talker.args.hidden_size
        self.projection = (
            nn.Linear(width, args.hidden_size) if width != args.hidden_size else nn.Identity()
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        # heads[i-1]: codebook i's logits from the hidden state at position i.
        self.heads = nn.Parameter(torch.empty(self.num_codebooks - 1, self.vocab, args.hidden_size))
        self.attn = FrameAttention(
            args.num_layers, self.num_codebooks, args.num_kv_heads, args.head_dim
        )
        self.kernels = None  # FlashInfer's fused kernels once use_fused_kernels() ran

    def use_fused_kernels(self) -> bool:
        """FlashInfer's fused norm/RoPE/activation kernels in the layers, where they apply. A
        step of the depth stage is 15 codebooks x its layers of small kernels, ~50 a layer in
        the plain blocks (docs/models.md): the fused ones are ~15."""
        self.kernels = fused_kernels_for(self.args, self.rotary, self.heads)
        return self.kernels is not None

    def _step(self, inputs: torch.Tensor, start: int) -> torch.Tensor:
        """inputs [B, n, talker_hidden] at positions start.. → hidden of the last [B, H]."""
        b, n, _ = inputs.shape
        self.attn.at(start, n)
        x = self.projection(inputs).reshape(b * n, -1)
        positions = torch.arange(start, start + n, device=x.device).repeat(b)
        x = run_decoder_stack(
            x, positions, self.layers, self.rotary, self.norm, self.attn, self.kernels
        )
        return x.view(b, n, -1)[:, -1]

    def generate(
        self, hidden: torch.Tensor, first: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        """hidden [B, talker_hidden] (after the talker's norm), first [B] (codebook 0) → the
        frame's codes [B, num_codebooks]."""
        self.attn.begin(hidden.shape[0], hidden.device, hidden.dtype)
        codes = [first]
        inputs = torch.stack([hidden, self.talker_embed(first)], dim=1)
        for i in range(1, self.num_codebooks):
            h = self._step(inputs, 0 if i == 1 else i)
            codes.append(sample(F.linear(h, self.heads[i - 1]).float(), i))
            if i + 1 < self.num_codebooks:
                inputs = self.residual_embed(codes[-1] + (i - 1) * self.vocab)[:, None]
        return torch.stack(codes, dim=1)

    def hf_targets(self) -> dict[str, torch.Tensor]:
        prefix = "talker.code_predictor."
        targets = hf_layer_targets(self.layers, self.args, prefix + "model.layers.")
        targets[prefix + "model.norm.weight"] = self.norm.weight
        for i in range(self.num_codebooks - 1):
            targets[f"{prefix}lm_head.{i}.weight"] = self.heads[i]
        if isinstance(self.projection, nn.Linear):
            targets[prefix + "small_to_mtp_projection.weight"] = self.projection.weight
            targets[prefix + "small_to_mtp_projection.bias"] = self.projection.bias
        return targets
