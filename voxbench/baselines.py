"""Which per-request baseline (docs/benchmarking.md) serves a model: CosyVoice 2's
(voxbench/cosyvoice_baseline.py), Orpheus's (voxbench/hf_baseline.py) or Qwen3-TTS's
(voxbench/qwen3_tts_baseline.py), chosen by the model's family (models/families.py); a model
of another family has none and is refused, naming those that have one. `voxgate bench
--baseline` and `python -m voxbench.baseline_server` start theirs here."""

from __future__ import annotations

from models.checkpoint_errors import CheckpointError
from models.families import FAMILIES, family_of, names_text
from voxbench.per_request import PerRequestBaseline

# The families whose models have a per-request baseline (their reference decoding, one request
# at a time), by the family name models/families.py gives them.
BASELINE_FAMILIES = ("CosyVoice 2", "Orpheus", "Qwen3-TTS")


def load_baseline(
    model: str, device: str | None = None, random_weights: bool = False
) -> PerRequestBaseline:
    """The baseline for a preset (`tiny-orpheus`, `orpheus-3b`, `tiny-cosyvoice2`,
    `cosyvoice2-0.5b`, `tiny-qwen3-tts`, `qwen3-tts-1.7b` …) or an Orpheus, CosyVoice 2 or
    Qwen3-TTS checkpoint folder / repo id, loaded the way its model card does, in bf16 on a GPU
    (float32 on the CPU); started and ready to serve. CheckpointError for a model of a family
    without a baseline."""
    family = baseline_family(model)
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if family == "CosyVoice 2":
        from voxbench.cosyvoice_baseline import load_cosyvoice_baseline

        return load_cosyvoice_baseline(model, dev, dtype, random_weights)
    if family == "Qwen3-TTS":
        from voxbench.qwen3_tts_baseline import load_qwen3_tts_baseline

        return load_qwen3_tts_baseline(model, dev, dtype, random_weights)
    from voxbench.hf_baseline import load_orpheus_baseline

    return load_orpheus_baseline(model, dev, dtype, random_weights)


def baseline_family(model: str) -> str:
    """The family of `model` (a preset, folder or repo id) when it has a per-request baseline;
    CheckpointError naming the families (and presets) that have one otherwise."""
    family = family_of(model).name
    if family not in BASELINE_FAMILIES:
        with_baseline = [
            f"{f.name} ({', '.join(f.presets)})" for f in FAMILIES if f.name in BASELINE_FAMILIES
        ]
        raise CheckpointError(
            f"{model} is a {family} model, which has no per-request baseline; --baseline "
            f"serves {names_text(with_baseline)} models"
        )
    return family
