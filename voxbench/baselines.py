"""Which per-request baseline (docs/benchmarking.md) serves a model, chosen by the model's family
(models/families.py): `BASELINES` names each family's module and loader; a model of another
family has none and is refused, naming those that have one. `voxgate bench --baseline` and
`python -m voxbench.baseline_server` start theirs here."""

from __future__ import annotations

import importlib

from models.checkpoint_errors import CheckpointError
from models.families import FAMILIES, family_of, names_text
from voxbench.per_request import PerRequestBaseline

# The families whose models have a per-request baseline (their reference decoding, one request
# at a time), by the family name models/families.py gives them: the module and its loader,
# `load(model, device, dtype, random_weights) -> PerRequestBaseline`.
BASELINES = {
    "Chatterbox": ("voxbench.chatterbox_baseline", "load_chatterbox_baseline"),
    "CosyVoice 2": ("voxbench.cosyvoice_baseline", "load_cosyvoice_baseline"),
    "Orpheus": ("voxbench.hf_baseline", "load_orpheus_baseline"),
    "Qwen3-TTS": ("voxbench.qwen3_tts_baseline", "load_qwen3_tts_baseline"),
    "Zonos": ("voxbench.zonos_baseline", "load_zonos_baseline"),
}


def load_baseline(
    model: str, device: str | None = None, random_weights: bool = False
) -> PerRequestBaseline:
    """The baseline for a preset (`tiny-orpheus`, `orpheus-3b`, `tiny-cosyvoice2`,
    `qwen3-tts-1.7b`, `zonos-v0.1`, `chatterbox` …) or a checkpoint folder / repo id of a
    family in `BASELINES`, loaded the way its model card does, in bf16 on a GPU (float32 on
    the CPU); started and ready to serve. CheckpointError for a model of a family without a
    baseline."""
    module, loader = BASELINES[baseline_family(model)]
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    load = getattr(importlib.import_module(module), loader)
    return load(model, dev, dtype, random_weights)


def baseline_family(model: str) -> str:
    """The family of `model` (a preset, folder or repo id) when it has a per-request baseline;
    CheckpointError naming the families (and presets) that have one otherwise."""
    family = family_of(model).name
    if family not in BASELINES:
        with_baseline = [
            f"{f.name} ({', '.join(f.presets)})" for f in FAMILIES if f.name in BASELINES
        ]
        raise CheckpointError(
            f"{model} is a {family} model, which has no per-request baseline; --baseline "
            f"serves {names_text(with_baseline)} models"
        )
    return family
