"""voxgate-tiny in the family table (models/families.py): the model served on CPUs."""

from __future__ import annotations

from models.family_spec import Checkpoint, LoadRequest, ModelFamily, ServingDefaults

PRESET = "voxgate-tiny"


def _recognises(checkpoint: Checkpoint) -> bool:
    from models.voxgate_tiny.loading import is_voxgate_tiny_config

    return checkpoint.config is not None and is_voxgate_tiny_config(checkpoint.config)


def _load(request: LoadRequest):
    from models.voxgate_tiny.loading import load_voxgate_tiny, shipped_weights
    from models.voxgate_tiny.presets import ensure_random_voxgate_tiny

    if request.model == PRESET:
        source = ensure_random_voxgate_tiny() if request.random_weights else shipped_weights()
        return load_voxgate_tiny(source, request.device, request.dtype, name=PRESET)
    return load_voxgate_tiny(request.model, request.device, request.dtype)


# On a 2-core host each of these lifted its served goodput (BENCHMARKS.md, "voxgate-tiny on
# CPU"): no GIL shared with the gateway, int8 weights, and one torch thread per two cores (the
# other core encodes Opus).
FAMILY = ModelFamily(
    name="voxgate-tiny",
    presets={
        PRESET: "Voxgate's own small trained voice (character SpeechLM + VoxCodec, CPU real time)",
    },
    load=_load,
    recognises=_recognises,
    checkpoint_hint="voxgate-tiny: its config.json with model_type voxgate_tiny",
    own_codec="their own codec (VoxCodec) and one voice",
    # Its preset holds trained weights; --random-weights builds the same layout untrained.
    random_layouts=frozenset({PRESET}),
    serving=ServingDefaults(
        cpu_engine_process=True,
        cpu_int8=True,
        cpu_half_threads=True,
    ),
)
