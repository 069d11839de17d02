"""Chatterbox in the family table (models/families.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.serving_options import FlowHiftLaneOptions
from models.family_spec import Checkpoint, LoadRequest, ModelFamily
from models.request_options import request_option

PRESETS = {
    "tiny-chatterbox": "Chatterbox scaled down (T3 with CFG, S3Gen flow + HiFT), seeded random "
    "weights",
    "chatterbox": "ResembleAI/chatterbox (T3 0.5B with CFG, S3Gen flow + HiFT, 24 kHz)",
}


@dataclass(frozen=True)
class ChatterboxRequestOptions:
    """What each request may set (`model_options`), with ChatterboxTTS.generate's defaults
    (config.py, SAMPLING). The exaggeration replaces the voice's own, as generate's does."""

    exaggeration: float = request_option(
        0.5, 0.0, 2.0, "emotion exaggeration: 0.5 as recorded, higher more expressive"
    )
    cfg_weight: float = request_option(
        0.5, 0.0, 1.0, "classifier-free guidance weight: 0 none; about 0.3 slows a fast voice"
    )


def _recognises(checkpoint: Checkpoint) -> bool:
    from models.chatterbox.layout import is_chatterbox_folder

    folder = checkpoint.local
    return folder is not None and is_chatterbox_folder(folder)


def _load(request: LoadRequest):
    from models.chatterbox.checkpoint import load_chatterbox
    from models.chatterbox.model import ChatterboxModel
    from models.chatterbox.presets import ensure_random_chatterbox, ensure_tiny_chatterbox

    model = request.model
    if model == "tiny-chatterbox":
        folder = ensure_tiny_chatterbox()
    elif model == "chatterbox":
        if not request.random_weights:
            raise CheckpointError(
                "chatterbox: download ResembleAI/chatterbox (t3_cfg.safetensors, "
                "s3gen.safetensors, ve.safetensors, conds.pt, tokenizer.json) and pass its folder "
                "as --model, or add --random-weights for the real shapes with random weights"
            )
        folder = ensure_random_chatterbox()
    else:
        folder = Path(model).expanduser()
    name = model if model in PRESETS else "chatterbox"
    flow_dtype = request.options.flow_dtype(request.dtype)
    parts = load_chatterbox(folder, request.device, request.dtype, flow_dtype)
    loaded = ChatterboxModel(parts, name=name)
    if request.voices_dir is not None:
        loaded.add_voices_dir(request.voices_dir)
    return request.options.apply(loaded)


FAMILY = ModelFamily(
    name="Chatterbox",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Chatterbox: t3_cfg.safetensors and s3gen.safetensors (ResembleAI/chatterbox)",
    options=FlowHiftLaneOptions,
    request_options=ChatterboxRequestOptions,
    own_codec="their own S3Gen codec",
    takes_voices=True,
    random_layouts=frozenset({"chatterbox"}),
    seeded_presets=frozenset({"tiny-chatterbox"}),
)
