"""CosyVoice's `UpsampleConformerEncoder`: token embeddings → a look-ahead convolution → conformer
layers (relative-position attention, chunk-causal in streaming mode) → 2x upsampling → more
conformer layers. Parameter names follow flow.pt's `encoder.*`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def chunk_mask(valid: torch.Tensor, chunk: int | torch.Tensor) -> torch.Tensor:
    """valid [B, T] bool → attention mask [B, T, T]: query i sees key j when j is valid and j's
    chunk is not after i's (every left chunk; CosyVoice's num_decoding_left_chunks = -1).
    `chunk`: the chunk length (0: full attention), or each position's chunk index [B or 1, T]
    (chunk_ids) when the chunks are not all one length."""
    t = valid.shape[1]
    mask = valid[:, None, :].expand(-1, t, -1)
    if isinstance(chunk, int):
        if chunk == 0:
            return mask
        chunk = chunk_ids(t, chunk, valid.device)
    return mask & (chunk[:, None, :] <= chunk[:, :, None])


def chunk_ids(
    t: int,
    chunk: int,
    device,
    first_end: torch.Tensor | None = None,
    short_by: int = 0,
    prompt_end: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each of T positions' attention chunk → [1, T] (or [B, T] with first_end / prompt_end)
    long. Chunks are `chunk` long from position 0, except that a row may hold a first generated
    chunk `short_by` positions shorter (a short first audio chunk, FlowHiftDetokenizer.first_hop):
    it ends at that row's `first_end` [B], and the grid after it continues `chunk` long.
    `prompt_end` [B]: the row's voice prompt (positions before it) is one chunk of its own and
    the grid starts where it ends (Step-Audio 2's streaming: its prompt is cached as one chunk).
    `chunk` 0: one chunk over everything (full attention, as Chatterbox's S3Gen attends)."""
    pos = torch.arange(t, device=device)[None, :]
    if chunk == 0:
        return torch.zeros_like(pos)
    rel = pos if prompt_end is None else pos - prompt_end[:, None]
    if first_end is not None and short_by:
        rel = rel + short_by * (pos >= first_end[:, None])
    ids = torch.div(rel, chunk, rounding_mode="floor")
    if prompt_end is not None:
        ids = torch.where(rel < 0, -1, ids)
    return ids


def rel_position_table(t: int, d: int, device, dtype) -> torch.Tensor:
    """ESPnet's relative sinusoids [2T-1, D]: row k encodes relative position T-1-k."""
    rel = torch.arange(t - 1, -t, -1, device=device, dtype=torch.float32)[:, None]
    div = torch.exp(
        torch.arange(0, d, 2, device=device, dtype=torch.float32) * -(math.log(10000.0) / d)
    )
    pe = torch.zeros(2 * t - 1, d, device=device)
    pe[:, 0::2] = torch.sin(rel * div)
    pe[:, 1::2] = torch.cos(rel * div)
    return pe.to(dtype)


class LinearEmbed(nn.Module):
    """LinearNoSubsampling + EspnetRelPositionalEncoding's input scaling (`out.0`, `out.1`)."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.xscale = math.sqrt(odim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) * self.xscale


class RelPositionAttention(nn.Module):
    def __init__(self, heads: int, dim: int) -> None:
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.d))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x [B, T, D], mask [B, T, T] bool, pos [2T-1, D]."""
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d)
        k = self.linear_k(x).view(b, t, self.h, self.d).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d).transpose(1, 2)
        p = self.linear_pos(pos).view(-1, self.h, self.d).transpose(0, 1)  # [H, 2T-1, d]
        content = ((q + self.pos_bias_u).transpose(1, 2)) @ k.transpose(-2, -1)  # [B, H, T, T]
        position = ((q + self.pos_bias_v).transpose(1, 2)) @ p.transpose(-2, -1)  # [B, H, T, 2T-1]
        # Transformer-XL's shift, as a gather: key j of query i is at relative position i - j,
        # which is column T-1-i+j of the table.
        i = torch.arange(t, device=x.device)
        cols = (t - 1 - i[:, None] + i[None, :]).expand(b, self.h, t, t)
        scores = (content + position.gather(-1, cols)) / math.sqrt(self.d)
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        attn = scores.softmax(dim=-1).masked_fill(~mask[:, None], 0.0)
        out = (attn @ v).transpose(1, 2).reshape(b, t, self.h * self.d)
        return self.linear_out(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Pre-norm attention + feed-forward (CosyVoice 2 uses neither macaron nor conv modules)."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(heads, dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.norm_ff = nn.LayerNorm(dim, eps=1e-12)
        self.norm_mha = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x, mask, pos):
        x = x + self.self_attn(self.norm_mha(x), mask, pos)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookaheadLayer(nn.Module):
    """Each token sees the next `lookahead` ones (conv1), then a causal conv3 (conv2)."""

    def __init__(self, dim: int, lookahead: int) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.conv1 = nn.Conv1d(dim, dim, lookahead + 1)
        self.conv2 = nn.Conv1d(dim, dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] (zeros past each row's last token) → [B, T, D]."""
        h = F.pad(x.transpose(1, 2), (0, self.lookahead))
        h = F.leaky_relu(self.conv1(h))
        h = self.conv2(F.pad(h, (2, 0)))
        return h.transpose(1, 2) + x


class Upsample1D(nn.Module):
    def __init__(self, dim: int, stride: int = 2) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(dim, dim, stride * 2 + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] → [B, stride*T, D]: nearest repeat, then a causal conv."""
        h = F.interpolate(x.transpose(1, 2), scale_factor=float(self.stride), mode="nearest")
        return self.conv(F.pad(h, (self.stride * 2, 0))).transpose(1, 2)


class UpsampleConformerEncoder(nn.Module):
    def __init__(
        self,
        dim: int,
        heads: int,
        hidden: int,
        num_blocks: int,
        num_up_blocks: int,
        chunk: int,
        lookahead: int,
    ) -> None:
        super().__init__()
        self.chunk = chunk
        self.lookahead = lookahead
        self.embed = LinearEmbed(dim, dim)
        self.pre_lookahead_layer = PreLookaheadLayer(dim, lookahead)
        self.encoders = nn.ModuleList(ConformerLayer(dim, heads, hidden) for _ in range(num_blocks))
        self.up_layer = Upsample1D(dim, 2)
        self.up_embed = LinearEmbed(dim, dim)
        self.up_encoders = nn.ModuleList(
            ConformerLayer(dim, heads, hidden) for _ in range(num_up_blocks)
        )
        self.after_norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        out_lengths: torch.Tensor,
        streaming: bool,
        first_end: torch.Tensor | None = None,
        short_by: int = 0,
        prompt_end: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, T, D] token embeddings, `lengths` real tokens per row (look-ahead context
        included), `out_lengths` tokens to encode per row (lengths minus the context, or
        lengths when the utterance is final and the look-ahead sees zeros). `first_end` [B] /
        `short_by`: a row's short first generated chunk, `prompt_end` [B]: its voice prompt's tokens
        as one chunk (chunk_ids). → [B, 2T, D]."""
        t = x.shape[1]
        pos_idx = torch.arange(t, device=x.device)
        present = (pos_idx[None, :] < lengths[:, None])[..., None]
        # Rows end in zeros, as CosyVoice's look-ahead padding, whatever the batch's padding.
        x = self.pre_lookahead_layer(self.embed(x) * present)
        # Chunk-causal attention (CosyVoice 2) sees the look-ahead tokens only through the
        # look-ahead conv; full attention (chunk 0: S3Gen) attends to them too, as the
        # official flow's non-final decode encodes every token before dropping their frames.
        attend = out_lengths if self.chunk else lengths
        valid = pos_idx[None, :] < attend[:, None]
        chunks = 0
        if streaming:
            chunks = chunk_ids(t, self.chunk, x.device, first_end, short_by, prompt_end)
        x = self._layers(self.encoders, x, valid, chunks)
        x = self.embed_up(x)
        valid = torch.arange(2 * t, device=x.device)[None, :] < 2 * attend[:, None]
        if streaming:
            ends = None if first_end is None else 2 * first_end
            prompt2 = None if prompt_end is None else 2 * prompt_end
            chunks = chunk_ids(2 * t, 2 * self.chunk, x.device, ends, 2 * short_by, prompt2)
        x = self._layers(self.up_encoders, x, valid, chunks)
        return self.after_norm(x)

    def embed_up(self, x: torch.Tensor) -> torch.Tensor:
        return self.up_embed(self.up_layer(x))

    def _layers(self, layers, x, valid, chunk):
        mask = chunk_mask(valid, chunk)
        pos = rel_position_table(x.shape[1], x.shape[2], x.device, x.dtype)
        for layer in layers:
            x = layer(x, mask, pos)
        return x
