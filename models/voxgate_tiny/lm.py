"""voxgate-tiny's networks: a Llama backbone over rows of (codes, text) on the engine's paged KV
cache, and a small depth stage for the other codebooks of a frame. The same modules train
(training/speechlm.py, with `DenseCausalAttention`) and serve (the engine's backends).

A step's token is a row of `K + 1` ids: K codec codes (`frames_per_row` consecutive codec
frames: two 20 ms frames a row halve the backbone's steps per second of audio, which is what a
CPU pays for), then a text column; -1 marks
an absent column. Prompt rows carry text only (`<bos>`, characters, `<audio>`; a phone-reading
checkpoint has phone_text.py's symbols in place of characters), generated rows codes only. The backbone embeds a row as the sum of its present columns' embeddings.

With `reading` (checkpoints trained on character alignments, training/aligner.py), rows are
`K + 3` wide and a generated row carries the model's **reading pointer** into the text: column
K the character being spoken (`text_vocab + char`), column K+1 the next one
(`2·text_vocab + char`, or `3·text_vocab` past the end), column K+2 the pointer itself (host
bookkeeping, not embedded). After the frame's last code the depth stage predicts how far the
pointer moves in this row (0–3 characters, greedy); the model's `follow_row` then moves it and
writes the characters from the prompt on the host (models/voxgate_tiny/model.py). So the
backbone is always told where in the text it is and what comes next, and the pointer can only
walk forward through the real text. Without it the model reads the first words and then drifts
into the corpus's templates; a model that *predicts* the character it reads drifts the same way
after a few words (training/README.md).

With `pointer_positions` (config.json; 0 = off, as in older checkpoints) the pointer
column is embedded too, from the same table as the prompt symbols' own index (prompt rows carry
it in column K+2): a frame row and the prompt row of the symbol it is saying then share a
vector, so attention can fetch that symbol's context (its word, its neighbours, the phrase
around it) by content. Without it only the two symbols' identities reach the frame row, and
finding their place in the prompt needs counting (a phone occurs many times in a sentence).

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

# Pointer advances a row can predict: 0-3 characters in 40 ms (two frames).
READ_ADVANCES = 4


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
        self,
        hidden: int,
        inner: int,
        num_codebooks: int,
        codebook_size: int,
        eps: float,
        read_classes: int = 0,
    ) -> None:
        """`read_classes` > 0: one more step after the last code reads the row's pointer
        advance (see the module docstring) off `read_head`."""
        super().__init__()
        self.k, self.v = num_codebooks, codebook_size
        steps = num_codebooks - 1 + (1 if read_classes else 0)
        # The code of codebook j feeding step j+1 sits at j·V + code.
        self.embed = nn.Embedding(steps * codebook_size, hidden)
        self.blocks = nn.ModuleList(DepthBlock(hidden, inner, eps) for _ in range(steps))
        self.heads = nn.ModuleList(
            nn.Linear(hidden, codebook_size, bias=False) for _ in range(num_codebooks - 1)
        )
        self.read_head = nn.Linear(hidden, read_classes, bias=False) if read_classes else None

    def _next(
        self, z: torch.Tensor, code: torch.Tensor, j: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed codebook j's code; return (state, logits of codebook j+1, or of the reading
        position after the last codebook)."""
        z = z + self.embed(code.clamp(0, self.v - 1) + j * self.v)
        z, feats = self.blocks[j](z)
        head = self.heads[j] if j < self.k - 1 else self.read_head
        return z, head(feats)

    def teacher_forced_logits(
        self, hidden: torch.Tensor, codes: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden [N, H], the frame's true codes [N, K] → logits of codebooks 1..K-1
        [N, K-1, V], and of the pointer advance [N, read_classes] (None without reading)."""
        z, out = hidden, []
        for j in range(self.k - 1):
            z, logits = self._next(z, codes[:, j], j)
            out.append(logits)
        read = self._next(z, codes[:, -1], self.k - 1)[1] if self.read_head is not None else None
        return torch.stack(out, dim=1), read

    def generate(
        self, hidden: torch.Tensor, first: torch.Tensor, sample: CodeSampler
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden [N, H], codebook 0 [N] → codes [N, K], each drawn with the engine's sampler,
        and the pointer advance [N] (greedy; None without reading)."""
        z, codes = hidden, [first]
        for j in range(self.k - 1):
            z, logits = self._next(z, codes[-1], j)
            codes.append(sample(logits.float(), j + 1))
        read = None
        if self.read_head is not None:
            read = self._next(z, codes[-1], self.k - 1)[1].argmax(-1)
        return torch.stack(codes, dim=1), read


class VoxgateTinyLM(nn.Module):
    def __init__(
        self,
        args: LlamaArgs,
        num_codebooks: int,
        codebook_size: int,
        text_vocab: int,
        depth_inner: int,
        reading: bool = False,
        pointer_positions: int = 0,
    ) -> None:
        super().__init__()
        if pointer_positions and not reading:
            raise ValueError("pointer_positions embeds the reading pointer: it needs reading")
        self.args = args
        self.num_codebooks, self.codebook_size = num_codebooks, codebook_size
        self.text_vocab, self.reading = text_vocab, reading
        self.eos = codebook_size  # codebook-0 id that ends the audio
        h = args.hidden_size
        # Prompt characters, then (with reading) the pointer's character and the next one
        # (or past-the-end).
        self.embed_text = nn.Embedding(3 * text_vocab + 1 if reading else text_vocab, h)
        # Every codebook's embeddings in one table; codebook k's code c sits at k·V + c.
        self.embed_audio = nn.Embedding(num_codebooks * codebook_size, h)
        # Symbol index in the text: prompt rows' own, frame rows' pointer (module docstring).
        self.pointer_positions = pointer_positions
        self.embed_position = nn.Embedding(pointer_positions, h) if pointer_positions else None
        self.register_buffer(
            "offsets", torch.arange(num_codebooks) * codebook_size, persistent=False
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(h, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.head = nn.Linear(h, codebook_size + 1, bias=False)  # codebook 0 + end of audio
        self.depth = DepthStage(
            h,
            depth_inner,
            num_codebooks,
            codebook_size,
            args.rms_norm_eps,
            read_classes=READ_ADVANCES if reading else 0,
        )

    @property
    def row_width(self) -> int:
        return self.num_codebooks + (3 if self.reading else 1)

    def embed(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [T, W] → [T, H]: the sum of the embeddings of each row's present columns (the
        K codes, the text column, with reading the next-character column, and with
        pointer_positions the symbol index column)."""
        k = self.num_codebooks
        codes = rows[:, :k]
        present = (codes >= 0) & (codes < self.codebook_size)
        audio = self.embed_audio(torch.where(present, codes, 0) + self.offsets)  # [T, K, H]
        out = (audio * present[..., None].to(audio.dtype)).sum(dim=1)
        for text in rows[:, k : k + (2 if self.reading else 1)].unbind(1):
            out = out + self.embed_text(text.clamp(min=0)) * (text >= 0)[:, None].to(out.dtype)
        if self.embed_position is not None and rows.shape[1] > k + 2:  # narrower: no pointers
            index = rows[:, k + 2]
            # Past the table (never, for a text that passed the model's length check): the
            # last entry, not an index error.
            vec = self.embed_position(index.clamp(0, self.pointer_positions - 1))
            out = out + vec * (index >= 0)[:, None].to(out.dtype)
        return out

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
