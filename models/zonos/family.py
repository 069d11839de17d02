"""Zonos v0.1 in the family table (models/families.py)."""

from __future__ import annotations

from models.checkpoint_errors import CheckpointError
from models.family_spec import Checkpoint, LoadRequest, ModelFamily, ServingDefaults
from models.zonos.request_options import ZonosRequestOptions

# The options each request may set (the generic per-request options path's ModelFamily.
# request_options, ModelFacts.request_options; applied by ZonosModel.preprocess_with_options).
REQUEST_OPTIONS = ZonosRequestOptions

PRESETS = {
    "tiny-zonos": "Zonos v0.1 transformer scaled down (eSpeak phonemes, CFG, DAC 44.1 kHz), "
    "seeded random weights",
    "zonos-v0.1": "Zyphra/Zonos-v0.1-transformer with descript/dac_44khz (44.1 kHz)",
}


def _recognises(checkpoint: Checkpoint) -> bool:
    from models.zonos.loading import is_zonos_config

    return is_zonos_config(checkpoint.config)


def _load(request: LoadRequest):
    from models.zonos.config import DAC_REPO, TRANSFORMER_REPO
    from models.zonos.loading import load_zonos
    from models.zonos.presets import ensure_random_zonos, ensure_tiny_zonos
    from models.zonos.speaker import SPEAKER_REPO

    model = request.model
    request.refuse(
        codec="Zonos' codec is DAC 44.1 kHz (a dac/ folder beside the model, or "
        "descript/dac_44khz); drop --codec",
    )
    device, dtype, voices = request.device, request.dtype, request.voices_dir
    if model == "tiny-zonos":
        if request.random_weights:
            raise CheckpointError("tiny-zonos has random weights already; drop --random-weights")
        folder = ensure_tiny_zonos() / "model"
        return load_zonos(str(folder), device, dtype, name=model, voices_dir=voices)
    if model == "zonos-v0.1":
        if request.random_weights:
            folder = ensure_random_zonos() / "model"
            return load_zonos(str(folder), device, dtype, name=model, voices_dir=voices)
        return load_zonos(TRANSFORMER_REPO, device, dtype, DAC_REPO, model, voices, SPEAKER_REPO)
    if request.random_weights:
        raise CheckpointError("--random-weights goes with the zonos-v0.1 preset")
    return load_zonos(model, device, dtype, voices_dir=voices)


FAMILY = ModelFamily(
    name="Zonos",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Zonos: config.json with backbone and prefix_conditioner "
    "(Zyphra/Zonos-v0.1-transformer)",
    # On the CPU a step is many small ops (two CFG rows, nine heads, the DAC's narrow convs):
    # a second torch thread per op buys little and stalls when the gateway needs the core.
    serving=ServingDefaults(cpu_half_threads=True),
    request_options=REQUEST_OPTIONS,
)
