"""The `tiny-csm` preset: the sesame/csm-1b layout (transformers format, Mimi included), scaled
down, with seeded random weights, written once to a cache folder so that it loads through the
real loader like any checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from models.codecs.mimi import make_audible, require_transformers
from models.csm.configs import TINY_CSM
from models.orpheus.tiny_tokenizer import write_tiny_tokenizer
from models.preset_cache import materialise
from models.random_weights import randomise

TINY_VERSION = "v2"  # bump when the tiny config or its weight recipe changes
CSM_SPECIALS = {2: "<|AUDIO|>", 3: "<|audio_eos|>"}  # offsets from <|begin_of_text|>


def write_csm_checkpoint(folder: Path, cfg: dict, seed: int) -> None:
    """What `CsmForConditionalGeneration.save_pretrained` writes, plus a Llama-3-shaped
    tokenizer. transformers' own init, except Mimi's (make_audible: its codebooks drawn, its
    audio scaled into [-1, 1])."""
    require_transformers()
    from transformers import CsmConfig, CsmForConditionalGeneration

    torch.manual_seed(seed)
    model = CsmForConditionalGeneration(CsmConfig.from_dict(cfg)).eval()
    make_audible(model.codec_model)
    model.save_pretrained(str(folder))
    write_tiny_tokenizer(folder, CSM_SPECIALS)


def ensure_tiny_csm(root: Path | None = None) -> Path:
    """The tiny preset's folder, created on first use in a temporary folder renamed into
    place, so concurrent first uses never see half a checkpoint."""
    write = lambda folder: write_csm_checkpoint(folder / "model", TINY_CSM, seed=2024)  # noqa: E731
    return materialise(f"tiny-csm-{TINY_VERSION}", write, root) / "model"


def random_csm_1b(
    device: torch.device, dtype: torch.dtype, seed: int = 0, voices_dir: str | None = None
):
    """sesame/csm-1b's real shapes with seeded random weights (N(0, 0.02), unit norms; Mimi's
    made audible), built on the device, with the tiny preset's Llama-3-shaped tokenizer (the
    real special ids; text means nothing to random weights): for GPU benchmarks, no checkpoint
    needed."""
    from models.codecs.mimi import build_mimi
    from models.csm.configs import CSM_1B
    from models.csm.loading import (
        add_voices_dir,
        assemble,
        build_csm,
        complete_config,
        load_tokenizer,
    )

    cfg = complete_config(CSM_1B, "the csm-1b preset")
    torch.manual_seed(seed)
    backbone, depth, _ = build_csm(cfg, device, dtype)
    randomise(backbone, depth)
    mimi = make_audible(build_mimi(cfg["codec_config"]))
    tokenizer = load_tokenizer(ensure_tiny_csm())
    model = assemble(cfg, backbone, depth, mimi, tokenizer, device, "csm-1b")
    if voices_dir is not None:
        add_voices_dir(model, voices_dir)
    return model
