"""The character recogniser behind the aligner: codec frames → per-frame log-probabilities over
CTC blank + voxgate-tiny's characters.

Each frame's input is the sum of its codebooks' embeddings (codebook k's code c is row
k·codebook_size + c of one table), then residual 1-D convolutions (local context, and the only
position information the encoder gets), then a small bidirectional transformer encoder (no
causal mask: alignment sees the whole utterance), then a linear head. The output classes are
CharTokenizer's ids with class 0 (`<pad>`, never a target) as the blank, so an alignment's
labels are the tokenizer's character ids as they are.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

MODEL_TYPE = "voxgate-char-ctc"
BLANK = 0  # CharTokenizer's <pad>


@dataclass(frozen=True)
class AlignerConfig:
    vocab_size: int  # CharTokenizer().vocab_size: classes = blank (0) + every other id
    num_codebooks: int = 4
    codebook_size: int = 1024  # embedding stride per codebook (VoxCodec uses codes < 1000)
    dim: int = 192
    conv_layers: int = 2
    conv_kernel: int = 5
    layers: int = 3
    heads: int = 4
    ff: int = 768
    dropout: float = 0.1


SIZES = {
    "default": {},
    # CPU sanity runs on real tokens (~3x cheaper a frame than default).
    "small": {"dim": 128, "layers": 2, "ff": 384},
    # CPU tests and smoke runs: same layout, a fraction of the width.
    "toy": {"dim": 64, "conv_layers": 1, "layers": 1, "heads": 2, "ff": 128, "dropout": 0.0},
}


class ConvBlock(nn.Module):
    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # x [B, T, D]; padding zeroed so it does not leak into the utterance's edges
        h = self.norm(x).masked_fill(~keep[..., None], 0.0)
        return x + F.gelu(self.conv(h.transpose(1, 2)).transpose(1, 2))


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).unbind(2)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,  # [B, 1, 1, T]: every frame attends to the real frames only
            dropout_p=self.dropout if self.training else 0.0,
        )
        x = x + F.dropout(
            self.proj(att.transpose(1, 2).reshape(b, t, d)), self.dropout, self.training
        )
        return x + F.dropout(self.ff(self.norm2(x)), self.dropout, self.training)


class CharCTC(nn.Module):
    def __init__(self, config: AlignerConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.num_codebooks * c.codebook_size, c.dim)
        self.register_buffer(
            "code_offsets", torch.arange(c.num_codebooks) * c.codebook_size, persistent=False
        )
        self.convs = nn.ModuleList(ConvBlock(c.dim, c.conv_kernel) for _ in range(c.conv_layers))
        self.blocks = nn.ModuleList(
            EncoderBlock(c.dim, c.heads, c.ff, c.dropout) for _ in range(c.layers)
        )
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab_size)

    def forward(self, codes: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """codes [B, T, K] (any int dtype), lengths [B] → log-probs [B, T, vocab] float32."""
        t = codes.shape[1]
        keep = torch.arange(t, device=codes.device)[None] < lengths.to(codes.device)[:, None]
        x = self.embed(codes.long() + self.code_offsets).sum(2)  # [B, T, D]
        for conv in self.convs:
            x = conv(x, keep)
        mask = keep[:, None, None, :]
        for block in self.blocks:
            x = block(x, mask)
        return F.log_softmax(self.head(self.norm(x)).float(), dim=-1)


def save_aligner(model: CharCTC, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    doc = {"model_type": MODEL_TYPE, **asdict(model.config)}
    (folder / "config.json").write_text(json.dumps(doc, indent=1) + "\n")


def load_aligner(folder: Path, device: torch.device) -> CharCTC:
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        doc = json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise SystemExit(
            f"{folder} holds no aligner (config.json missing): run "
            "`python -m training.aligner train` first"
        ) from None
    if doc.pop("model_type", None) != MODEL_TYPE:
        raise SystemExit(f"{folder}/config.json is not a {MODEL_TYPE} aligner")
    model = CharCTC(AlignerConfig(**doc))
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    return model.to(device).eval()
