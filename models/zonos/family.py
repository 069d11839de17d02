"""Zonos v0.1 in the family table (models/families.py)."""

from __future__ import annotations

from models.family_spec import Checkpoint, LoadRequest, ModelFamily, ServingDefaults
from models.zonos.request_options import ZonosRequestOptions

# The options each request may set (ModelFamily.request_options, which the registry announces
# as the model's ModelFacts.request_options; applied by ZonosModel.preprocess_with_options).
REQUEST_OPTIONS = ZonosRequestOptions

PRESETS = {
    "tiny-zonos": "Zonos v0.1 transformer scaled down (eSpeak phonemes, CFG, DAC 44.1 kHz), "
    "seeded random weights",
    "zonos-v0.1": "Zyphra/Zonos-v0.1-transformer with descript/dac_44khz (44.1 kHz)",
    "tiny-zonos-hybrid": "Zonos v0.1 hybrid scaled down (Mamba2 + attention layers, per-request "
    "SSM state), seeded random weights",
    "zonos-v0.1-hybrid": "Zyphra/Zonos-v0.1-hybrid (Mamba2 + attention) with descript/dac_44khz",
}
# preset → its writer in presets.py (and, for the real ones, its repo in config.py), by name:
# both modules import torch, which this table must not at import.
_SCALED = {"tiny-zonos": "ensure_tiny_zonos", "tiny-zonos-hybrid": "ensure_tiny_zonos_hybrid"}
_REAL = {
    "zonos-v0.1": ("ensure_random_zonos", "TRANSFORMER_REPO"),
    "zonos-v0.1-hybrid": ("ensure_random_zonos_hybrid", "HYBRID_REPO"),
}


def _recognises(checkpoint: Checkpoint) -> bool:
    from models.zonos.loading import is_zonos_config

    return is_zonos_config(checkpoint.config)


def _load(request: LoadRequest):
    from models.zonos import config, presets
    from models.zonos.loading import load_zonos
    from models.zonos.speaker import SPEAKER_REPO

    model = request.model
    device, dtype, voices = request.device, request.dtype, request.voices_dir
    if model in _SCALED:
        folder = getattr(presets, _SCALED[model])() / "model"
        return load_zonos(str(folder), device, dtype, name=model, voices_dir=voices)
    if model in _REAL:
        writer, repo = _REAL[model]
        if request.random_weights:
            folder = getattr(presets, writer)() / "model"
            return load_zonos(str(folder), device, dtype, name=model, voices_dir=voices)
        source = getattr(config, repo)
        return load_zonos(source, device, dtype, config.DAC_REPO, model, voices, SPEAKER_REPO)
    return load_zonos(model, device, dtype, voices_dir=voices)


FAMILY = ModelFamily(
    name="Zonos",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Zonos: config.json with backbone and prefix_conditioner "
    "(Zyphra/Zonos-v0.1-transformer or -hybrid)",
    # On the CPU a step is many small ops (two CFG rows, nine heads, the DAC's narrow convs):
    # a second torch thread per op buys little and stalls when the gateway needs the core.
    serving=ServingDefaults(cpu_half_threads=True),
    request_options=REQUEST_OPTIONS,
    own_codec="DAC 44.1 kHz (a dac/ folder beside the model, or descript/dac_44khz)",
    takes_voices=True,
    random_layouts=frozenset(_REAL),
    seeded_presets=frozenset(_SCALED),
)
