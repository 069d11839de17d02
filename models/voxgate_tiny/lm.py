"""voxgate-tiny's networks: a Llama backbone over rows of (codes, text) on the engine's paged KV
cache, and a small depth stage for the other codebooks of a frame. The same modules train
(training/speechlm.py, with `DenseCausalAttention`) and serve (the engine's backends).

A step's token is a row of `K + 1` ids: K codec codes (`frames_per_row` consecutive codec
frames: two 20 ms frames a row halve the backbone's steps per second of audio, which is what a
CPU pays for), then a text column; -1 marks
an absent column. Prompt rows carry text only (`<bos>`, characters, `<audio>`), generated rows
codes only. The backbone embeds a row as the sum of its present columns' embeddings.

The backbone's head predicts codebook 0 of the next frame, or the end-of-audio id
(`codebook_size`). Codebooks 1..K-1 come from the depth stage: starting from the backbone's
hidden state, each step adds the embedding of the code just drawn, runs a residual MLP and
reads codebook k off its own head, so each code is conditioned on the ones before it in the
frame. That is K-1 small matrix products per frame — a fraction of a transformer depth
decoder's cost, which matters on a laptop CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.base import CodeSampler
from models.layers.llama import DecoderLayer, LlamaArgs, RMSNorm, run_decoder_stack
from models.layers.rope import Rotary


class DepthBlock(nn.Module):
    def __init__(self, hidden: int, inner: int, eps: float) -> None:
        super().__init__()
        self.norm = RMSNorm(hidden, eps)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)
        self.out_norm = RMSNorm(hidden, eps)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z [N, H] → (z after the block, normed features for the head)."""
        z = z + self.down(F.silu(self.up(self.norm(z))))
        return z, self.out_norm(z)


class DepthStage(nn.Module):
    def __init__(
        self, hidden: int, inner: int, num_codebooks: int, codebook_size: int, eps: float
    ) -> None:
        super().__init__()
        self.k, self.v = num_codebooks, codebook_size
        # The code of codebook j (j < K-1) feeding step j+1 sits at j·V + code.
        self.embed = nn.Embedding((num_codebooks - 1) * codebook_size, hidden)
        self.blocks = nn.ModuleList(
            DepthBlock(hidden, inner, eps) for _ in range(num_codebooks - 1)
        )
        self.heads = nn.ModuleList(
            nn.Linear(hidden, codebook_size, bias=False) for _ in range(num_codebooks - 1)
        )

    def _next(
        self, z: torch.Tensor, code: torch.Tensor, j: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed codebook j's code; return (state, logits of codebook j+1)."""
        z = z + self.embed(code.clamp(0, self.v - 1) + j * self.v)
        z, feats = self.blocks[j](z)
        return z, self.heads[j](feats)

    def teacher_forced_logits(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """hidden [N, H], the frame's true codes [N, K] → logits of codebooks 1..K-1 [N, K-1, V]."""
        z, out = hidden, []
        for j in range(self.k - 1):
            z, logits = self._next(z, codes[:, j], j)
            out.append(logits)
        return torch.stack(out, dim=1)

    def generate(
        self, hidden: torch.Tensor, first: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        """hidden [N, H], codebook 0 [N] → codes [N, K], each drawn with the engine's sampler."""
        z, codes = hidden, [first]
        for j in range(self.k - 1):
            z, logits = self._next(z, codes[-1], j)
            codes.append(sample(logits.float(), j + 1))
        return torch.stack(codes, dim=1)


class VoxgateTinyLM(nn.Module):
    def __init__(
        self,
        args: LlamaArgs,
        num_codebooks: int,
        codebook_size: int,
        text_vocab: int,
        depth_inner: int,
    ) -> None:
        super().__init__()
        self.args = args
        self.num_codebooks, self.codebook_size = num_codebooks, codebook_size
        self.eos = codebook_size  # codebook-0 id that ends the audio
        h = args.hidden_size
        self.embed_text = nn.Embedding(text_vocab, h)
        # Every codebook's embeddings in one table; codebook k's code c sits at k·V + c.
        self.embed_audio = nn.Embedding(num_codebooks * codebook_size, h)
        self.register_buffer(
            "offsets", torch.arange(num_codebooks) * codebook_size, persistent=False
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(h, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.head = nn.Linear(h, codebook_size + 1, bias=False)  # codebook 0 + end of audio
        self.depth = DepthStage(h, depth_inner, num_codebooks, codebook_size, args.rms_norm_eps)

    def embed(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [T, K+1] → [T, H]: the sum of the embeddings of each row's present columns."""
        k = self.num_codebooks
        codes, text = rows[:, :k], rows[:, k]
        present = (codes >= 0) & (codes < self.codebook_size)
        audio = self.embed_audio(torch.where(present, codes, 0) + self.offsets)  # [T, K, H]
        audio = (audio * present[..., None].to(audio.dtype)).sum(dim=1)
        words = self.embed_text(text.clamp(min=0)) * (text >= 0)[:, None].to(audio.dtype)
        return audio + words

    def forward(self, rows: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """rows [T, K+1], positions [T] → hidden [T, H] after the final norm."""
        return self.forward_embedded(self.embed(rows), positions, attn)

    def forward_embedded(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """Embedded rows x [T, H] (training adds dropout between `embed` and this) → hidden."""
        return run_decoder_stack(x, positions, self.layers, self.rotary, self.norm, attn)

    def first_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] → codebook-0 / end-of-audio logits [N, V+1] (float32)."""
        return self.head(hidden).float()


class DenseCausalAttention:
    """The attention 'backend' for training: B sequences of equal (padded) length L, flattened
    to T = B·L rows as the engine flattens a step; plain causal attention within each."""

    def __init__(self, batch: int, length: int) -> None:
        self.batch, self.length = batch, length

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        b, n = self.batch, self.length

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, n, *x.shape[1:]).transpose(1, 2)  # [B, H, L, D]

        # Shared KV heads repeated explicitly: the flash kernel then takes the call on any torch
        # version (enable_gqa may fall back to the slow math kernel).
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        return out.transpose(1, 2).reshape(q.shape)
