"""Model names → loaders. A name is a preset, a local checkpoint folder, or a Hub repo id."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.base import SpeechModel
from models.checkpoint_errors import CheckpointError
from models.loader import read_config, resolve_source

DEFAULT_MODEL = "tiny-orpheus"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str


PRESETS = {
    "tiny-orpheus": Preset("tiny-orpheus", "Orpheus architecture scaled down, seeded random weights (noise)"),
    "orpheus-3b": Preset("orpheus-3b", "canopylabs/orpheus-3b-0.1-ft with SNAC 24 kHz"),
}


def load_model(
    model: str = DEFAULT_MODEL,
    codec: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: bool = False,
    random_weights: bool = False,
) -> SpeechModel:
    """Load `model` (preset name, folder or repo id). `codec` overrides the model's default codec
    (a repo id or folder). `random_weights` builds a preset's real configuration with seeded
    random weights instead of reading a checkpoint (benchmarks without the download)."""
    from models.orpheus import configs
    from models.orpheus.loading import is_orpheus_config, load_orpheus
    from models.orpheus.presets import ensure_tiny_orpheus

    device = torch.device(device)
    if model == "tiny-orpheus":
        model_dir, codec_dir = ensure_tiny_orpheus()
        return load_orpheus(str(model_dir), codec or str(codec_dir), device, dtype, progress, name=model)
    if model == "orpheus-3b" and random_weights:
        return _random_orpheus_3b(codec, device, dtype)
    if model == "orpheus-3b":
        return load_orpheus(configs.REPO_ID, codec or configs.CODEC_REPO_ID, device, dtype, progress, name=model)
    if random_weights:
        raise CheckpointError(f"--random-weights works with presets only ({', '.join(PRESETS)})")
    cfg = read_config(resolve_source(model))
    if is_orpheus_config(cfg):
        return load_orpheus(model, codec or configs.CODEC_REPO_ID, device, dtype, progress)
    raise CheckpointError(
        f"{model!r} is not a model Voxgate knows: presets are {', '.join(PRESETS)}; a folder or "
        "repo id must hold a supported checkpoint (Orpheus: Llama config with the audio vocabulary)"
    )


def _random_orpheus_3b(codec: str | None, device: torch.device, dtype: torch.dtype) -> SpeechModel:
    from snac import SNAC
    from tokenizers import Tokenizer

    from models.codecs.snac import install_positional_noise, load_snac, snac_24khz_config
    from models.orpheus import configs
    from models.orpheus.loading import random_orpheus
    from models.orpheus.presets import ensure_tiny_orpheus

    if codec:
        snac = load_snac(codec, device=device)
    else:
        torch.manual_seed(0)
        snac = SNAC(**snac_24khz_config()).to(device).eval()
        install_positional_noise(snac)
    # The tiny preset's tokenizer has Llama 3's special ids; the text tokens of random weights
    # mean nothing anyway.
    model_dir, _ = ensure_tiny_orpheus()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return random_orpheus(configs.ORPHEUS_3B, snac, tokenizer, device, dtype, seed=0, name="orpheus-3b")
