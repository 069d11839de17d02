"""Moshi in the family table (models/families.py): full duplex."""

from __future__ import annotations

from models.family_spec import Checkpoint, LoadRequest, ModelFamily

PRESETS = {
    "tiny-moshi": "Moshi architecture scaled down (Mimi included), seeded random weights (noise)",
    "moshi-7b": "kmhf/hf-moshiko (transformers layout), full duplex",
}


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.model_type() == "moshi"


def _load(request: LoadRequest):
    from models.moshi import configs
    from models.moshi.loading import load_moshi
    from models.moshi.presets import ensure_tiny_moshi, random_moshi_7b

    model, device, dtype, progress = request.model, request.device, request.dtype, request.progress
    if model == "moshi-7b" and request.random_weights:
        return random_moshi_7b(device, dtype)
    if model == "tiny-moshi":
        return load_moshi(str(ensure_tiny_moshi()), device, dtype, progress, name=model)
    if model == "moshi-7b":
        return load_moshi(configs.REPO_ID, device, dtype, progress, name=model)
    return load_moshi(model, device, dtype, progress)


FAMILY = ModelFamily(
    name="Moshi",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Moshi: transformers' MoshiConfig",
    own_codec="their own Mimi codec and one voice",
    random_layouts=frozenset({"moshi-7b"}),
    seeded_presets=frozenset({"tiny-moshi"}),
)
