"""CSM in the family table (models/families.py)."""

from __future__ import annotations

from models.family_spec import Checkpoint, LoadRequest, ModelFamily

PRESETS = {
    "tiny-csm": "CSM architecture scaled down (Mimi included), seeded random weights (noise)",
    "csm-1b": "sesame/csm-1b (transformers layout) with its Mimi codec",
}


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.model_type() == "csm"


def _load(request: LoadRequest):
    from models.csm import configs
    from models.csm.loading import load_csm
    from models.csm.presets import ensure_tiny_csm, random_csm_1b

    model, device, dtype, progress = request.model, request.device, request.dtype, request.progress
    if request.random_weights:  # csm-1b's real shapes (models/load_checks.py refuses others)
        return random_csm_1b(device, dtype, voices_dir=request.voices_dir)
    if model in PRESETS:
        source = str(ensure_tiny_csm()) if model == "tiny-csm" else configs.REPO_ID
        return load_csm(source, device, dtype, progress, name=model, voices_dir=request.voices_dir)
    return load_csm(model, device, dtype, progress, voices_dir=request.voices_dir)


FAMILY = ModelFamily(
    name="CSM",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="CSM: transformers' CsmConfig",
    own_codec="their own Mimi codec",
    takes_voices=True,
    random_layouts=frozenset({"csm-1b"}),
    seeded_presets=frozenset({"tiny-csm"}),
)
