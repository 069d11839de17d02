"""Orpheus in the family table (models/families.py). Its loader needs the `snac` package, which
other families must not: it is imported only when an Orpheus model loads."""

from __future__ import annotations

from models.family_spec import Checkpoint, LoadRequest, ModelFamily
from models.orpheus import configs
from models.orpheus.serving_options import OrpheusLoadOptions


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.config is not None and configs.is_orpheus_config(checkpoint.config)


def _load(request: LoadRequest):
    return request.options.apply(_load_model(request), request.device)


def _load_model(request: LoadRequest):
    from models.orpheus.loading import load_orpheus
    from models.orpheus.presets import ensure_tiny_orpheus

    model, codec, device, dtype = request.model, request.codec, request.device, request.dtype
    if model == "tiny-orpheus":
        model_dir, codec_dir = ensure_tiny_orpheus()
        return load_orpheus(
            str(model_dir), codec or str(codec_dir), device, dtype, request.progress, name=model
        )
    if model == "orpheus-3b" and request.random_weights:
        return _random_orpheus_3b(codec, device, dtype)
    if model == "orpheus-3b":
        return load_orpheus(
            configs.REPO_ID,
            codec or configs.CODEC_REPO_ID,
            device,
            dtype,
            request.progress,
            name=model,
        )
    return load_orpheus(model, codec or configs.CODEC_REPO_ID, device, dtype, request.progress)


def _random_orpheus_3b(codec: str | None, device, dtype):
    """orpheus-3b's real shapes with seeded random weights: benchmarks without the download."""
    import torch
    from snac import SNAC
    from tokenizers import Tokenizer

    from models.codecs.snac_checkpoint import load_snac, snac_24khz_config
    from models.codecs.snac_noise import install_positional_noise
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
    return random_orpheus(
        configs.ORPHEUS_3B, snac, tokenizer, device, dtype, seed=0, name="orpheus-3b"
    )


FAMILY = ModelFamily(
    name="Orpheus",
    presets={
        "tiny-orpheus": "Orpheus architecture scaled down, seeded random weights (noise)",
        "orpheus-3b": "canopylabs/orpheus-3b-0.1-ft with SNAC 24 kHz",
    },
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Orpheus: Llama config with the audio vocabulary",
    options=OrpheusLoadOptions,
    takes_codec=True,  # another SNAC checkpoint (a repo id or folder)
    random_layouts=frozenset({"orpheus-3b"}),
    seeded_presets=frozenset({"tiny-orpheus"}),
)
