"""Which per-request baseline (BENCHMARK.md) serves a model: CosyVoice 2's
(voxbench/cosyvoice_baseline.py) for its presets and checkpoint folders, Orpheus's
(voxbench/hf_baseline.py) for the rest. `voxgate bench --baseline` and
`python -m voxbench.baseline_server` start theirs here."""

from __future__ import annotations

from pathlib import Path

from voxbench.per_request import PerRequestBaseline


def load_baseline(
    model: str, device: str | None = None, random_weights: bool = False
) -> PerRequestBaseline:
    """The baseline for a preset (`tiny-orpheus`, `orpheus-3b`, `tiny-cosyvoice2`,
    `cosyvoice2-0.5b`) or an Orpheus or CosyVoice 2 checkpoint folder / repo id, loaded the way
    its model card does, in bf16 on a GPU (float32 on the CPU); started and ready to serve."""
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if is_cosyvoice2(model):
        from voxbench.cosyvoice_baseline import load_cosyvoice_baseline

        return load_cosyvoice_baseline(model, dev, dtype, random_weights)
    from voxbench.hf_baseline import load_orpheus_baseline

    return load_orpheus_baseline(model, dev, dtype, random_weights)


def is_cosyvoice2(model: str) -> bool:
    from models.cosyvoice2.loading import is_cosyvoice2_folder

    if model in ("tiny-cosyvoice2", "cosyvoice2-0.5b"):
        return True
    return Path(model).expanduser().is_dir() and is_cosyvoice2_folder(Path(model).expanduser())
