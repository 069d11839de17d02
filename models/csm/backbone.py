"""CSM's backbone on the engine's paged KV cache: Llama decoder layers over rows of (codes,
text), and the codebook-0 head."""

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


class CsmBackbone(nn.Module):
    """Parameter names are ours; `hf_targets` maps transformers' `CsmForConditionalGeneration`
    tensor names onto them."""

    def __init__(
        self, args: LlamaArgs, num_codebooks: int, codebook_vocab: int, text_vocab: int
    ) -> None:
        super().__init__()
        self.args = args
        self.num_codebooks = num_codebooks
        self.embed_text = nn.Embedding(text_vocab, args.hidden_size)
        # Every codebook's embeddings in one table; codebook k's code c sits at k·vocab + c.
        self.embed_audio = nn.Embedding(num_codebooks * codebook_vocab, args.hidden_size)
        self.register_buffer(
            "offsets", torch.arange(num_codebooks) * codebook_vocab, persistent=False
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.codebook0_head = nn.Linear(args.hidden_size, codebook_vocab, bias=False)

    def embed(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [T, K+1] → [T, H]: the sum of the embeddings of each row's present columns."""
        k = self.num_codebooks
        codes, text = rows[:, :k], rows[:, k]
        audio = self.embed_audio(codes.clamp(min=0) + self.offsets)  # [T, K, H]
        audio = (audio * (codes >= 0)[..., None].to(audio.dtype)).sum(dim=1)
        words = self.embed_text(text.clamp(min=0)) * (text >= 0)[:, None].to(audio.dtype)
        return audio + words

    def forward(self, rows: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """rows [T, K+1], positions [T] → hidden [T, H] after the final norm."""
        return run_decoder_stack(
            self.embed(rows), positions, self.layers, self.rotary, self.norm, attn
        )

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] → codebook-0 logits [N, vocab] (float32)."""
        return F.linear(hidden, self.codebook0_head.weight).float()

    def hf_targets(self) -> dict[str, torch.Tensor]:
        targets = hf_layer_targets(self.layers, self.args, "backbone_model.layers.")
        targets.update(
            {
                "embed_text_tokens.weight": self.embed_text.weight,
                "backbone_model.embed_tokens.embed_audio_tokens.weight": self.embed_audio.weight,
                "backbone_model.norm.weight": self.norm.weight,
                "lm_head.weight": self.codebook0_head.weight,
            }
        )
        return targets
