"""Moshi presets: `tiny-moshi` (the kmhf/hf-moshiko layout scaled down, seeded random weights,
written once to the cache folder so it loads through the real loader), and `moshi-7b` with
random weights of the real shape (benchmarks without the download)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from models.codecs.mimi import make_audible, require_transformers
from models.moshi.configs import MOSHI_7B, TINY_MOSHI
from models.preset_cache import materialise
from models.random_weights import randomise

TINY_VERSION = "v2"  # bump when the tiny config or its weight recipe changes
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def write_moshi_checkpoint(folder: Path, cfg: dict, seed: int) -> None:
    """What `MoshiForConditionalGeneration.save_pretrained` writes, plus a tokenizer.json."""
    require_transformers()
    from transformers import MoshiConfig, MoshiForConditionalGeneration

    torch.manual_seed(seed)
    model = MoshiForConditionalGeneration(MoshiConfig.from_dict(dict(cfg))).eval()
    make_audible(model.audio_encoder)
    model.save_pretrained(str(folder))
    write_tiny_tokenizer(folder, int(cfg["vocab_size"]))


def write_tiny_tokenizer(folder: Path, vocab_size: int) -> None:
    """A SentencePiece-shaped vocabulary (ids 0..3 special, pieces with '▁' word starts) of
    Moshi's size; only id → piece is ever used, for transcripts."""
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(len(specials), vocab_size):
        syllable = _SYLLABLES[i % len(_SYLLABLES)]
        piece = ("\u2581" if i % 3 == 0 else "") + syllable + (str(i) if i >= 500 else "")
        vocab.setdefault(piece, i)
        if vocab[piece] != i:
            vocab[f"<extra_{i}>"] = i
    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(specials)
        ],
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        "pre_tokenizer": {"type": "WhitespaceSplit"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(spec))


def ensure_tiny_moshi(root: Path | None = None) -> Path:
    """The tiny preset's folder, created on first use in a temporary folder renamed into
    place, so concurrent first uses never see half a checkpoint."""
    write = lambda folder: write_moshi_checkpoint(folder / "model", TINY_MOSHI, seed=2025)  # noqa: E731
    return materialise(f"tiny-moshi-{TINY_VERSION}", write, root) / "model"


def random_moshi_7b(device: torch.device, dtype: torch.dtype, seed: int = 0):
    """The real Moshi-7B shapes with seeded random weights (N(0, 0.02), unit norms), built on
    the device: for capacity benchmarks, no checkpoint needed."""
    from models.moshi.loading import assemble, build_moshi, complete_config

    cfg = complete_config(MOSHI_7B, "the moshi-7b preset")
    torch.manual_seed(seed)
    temporal, depth, mimi = build_moshi(cfg, device, dtype)
    randomise(temporal, depth)
    make_audible(mimi)
    return assemble(cfg, temporal, depth, mimi, None, device, "moshi-7b")
