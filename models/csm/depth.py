"""CSM's depth decoder, stepped once per codebook for the whole batch.

For each frame the depth decoder sees the backbone's last hidden state (position 0) and the
codes drawn so far (position i holds codebook i-1), and its head for position i predicts
codebook i. Its context is one frame (at most `num_codebooks` positions) and is thrown away
after it, so its k/v live in a small dense buffer [batch, num_codebooks, kv_heads, head_dim]
per layer instead of the engine's paged cache: paging buys nothing for a 32-step context that
never outlives the step, and a dense buffer keeps every shape fixed. Each depth step attends
over the whole buffer with a position mask (entries from an earlier frame are masked out), so
the 31 steps of a frame have one shape each, with no host synchronisation in between: the
sampler hands back device tensors, which feed the next step directly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.base import CodeSampler
from models.layers.llama import (
    DecoderLayer,
    LlamaArgs,
    RMSNorm,
    hf_layer_targets,
    run_decoder_stack,
)
from models.layers.rope import Rotary


class FrameAttention:
    """The attention backend of the depth decoder's layers: dense k/v for one frame."""

    def __init__(self, num_layers: int, length: int, kv_heads: int, head_dim: int) -> None:
        self.shape = (num_layers, length, kv_heads, head_dim)
        self.k: torch.Tensor | None = None  # [layers, B, length, kv_heads, head_dim]
        self.v: torch.Tensor | None = None

    def begin(self, batch: int, device: torch.device, dtype: torch.dtype) -> None:
        layers, length, kvh, d = self.shape
        if (
            self.k is None
            or self.k.shape[1] < batch
            or self.k.device != device
            or self.k.dtype != dtype
        ):
            self.k = torch.zeros(layers, batch, length, kvh, d, device=device, dtype=dtype)
            self.v = torch.zeros_like(self.k)
            # What a query at position p may see: keys 0..p. Built on the device once.
            pos = torch.arange(length, device=device)
            self._visible = pos[None, :] <= pos[:, None]  # [length, length]
        self.batch = batch

    def at(self, start: int, count: int) -> None:
        """The next forward writes positions start .. start+count-1 of every row."""
        self.start, self.count = start, count
        self.mask = self._visible[start : start + count]  # [count, length]

    def forward(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """q [B·count, Hq, D]; k, v [B·count, Hkv, D], row-major by request."""
        b, n, s = self.batch, self.count, self.start
        keys, values = self.k[layer, :b], self.v[layer, :b]
        keys[:, s : s + n] = k.view(b, n, *k.shape[1:])
        values[:, s : s + n] = v.view(b, n, *v.shape[1:])
        out = F.scaled_dot_product_attention(
            q.view(b, n, *q.shape[1:]).transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=self.mask,
            enable_gqa=q.shape[1] != k.shape[1],
        )
        return out.transpose(1, 2).reshape(q.shape)


class CsmDepthDecoder(nn.Module):
    def __init__(
        self,
        args: LlamaArgs,
        num_codebooks: int,
        codebook_vocab: int,
        backbone_hidden: int,
        embed_audio: nn.Embedding | None = None,
    ) -> None:
        super().__init__()
        self.args = args
        self.num_codebooks = num_codebooks
        self.vocab = codebook_vocab
        # Tied checkpoints (tie_codebooks_embeddings) share the backbone's audio embeddings.
        self.embed = embed_audio or nn.Embedding(num_codebooks * codebook_vocab, backbone_hidden)
        self.projector = nn.Linear(backbone_hidden, args.hidden_size, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        # heads[i-1] maps the hidden state at position i to codebook i's logits.
        self.heads = nn.Parameter(torch.empty(num_codebooks - 1, args.hidden_size, codebook_vocab))
        self.attn = FrameAttention(args.num_layers, num_codebooks, args.num_kv_heads, args.head_dim)

    def _step(self, inputs: torch.Tensor, start: int) -> torch.Tensor:
        """inputs [B, n, backbone_hidden] at positions start.. → hidden of the last [B, H]."""
        b, n, _ = inputs.shape
        self.attn.at(start, n)
        x = self.projector(inputs).reshape(b * n, -1)
        positions = torch.arange(start, start + n, device=x.device).repeat(b)
        x = run_decoder_stack(x, positions, self.layers, self.rotary, self.norm, self.attn)
        return x.view(b, n, -1)[:, -1]

    def generate(
        self, hidden: torch.Tensor, first: torch.Tensor, sample: CodeSampler, code_limit: int
    ) -> torch.Tensor:
        """hidden [B, backbone_hidden], first [B] (codebook 0) → codes [B, num_codebooks].
        Logits beyond `code_limit` columns (codes the codec cannot decode) are left out."""
        self.attn.begin(hidden.shape[0], hidden.device, hidden.dtype)
        codes = [first]
        inputs = torch.stack([hidden, self.embed(first)], dim=1)  # position 0: the backbone
        for i in range(1, self.num_codebooks):
            h = self._step(inputs, 0 if i == 1 else i)
            logits = F.linear(h, self.heads[i - 1].T)[:, :code_limit].float()
            codes.append(sample(logits, i))
            inputs = self.embed(codes[-1] + i * self.vocab)[:, None]
        return torch.stack(codes, dim=1)

    def hf_targets(self) -> dict[str, torch.Tensor]:
        targets = hf_layer_targets(self.layers, self.args, "depth_decoder.model.layers.")
        targets.update(
            {
                "depth_decoder.model.embed_tokens.weight": self.embed.weight,
                "depth_decoder.model.inputs_embeds_projector.weight": self.projector.weight,
                "depth_decoder.model.norm.weight": self.norm.weight,
                "depth_decoder.codebooks_head.weight": self.heads,
            }
        )
        return targets
