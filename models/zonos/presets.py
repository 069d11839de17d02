"""`tiny-zonos` / `tiny-zonos-hybrid` (seeded random weights at scaled-down sizes, DAC included)
and the real shapes with random weights (`zonos-v0.1[-hybrid] --random-weights`), written on first use in the published
layouts in one folder: Zyphra/Zonos-v0.1-transformer's config.json + model.safetensors, with
`dac/` as descript/dac_44khz (transformers' DacModel.save_pretrained) and `speaker/` as
Zyphra/Zonos-v0.1-speaker-embedding (the speaker model's two .pt files) beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from models.preset_cache import materialise
from models.zonos.checkpoint import write_zonos_checkpoint
from models.zonos.config import REAL, REAL_HYBRID, TINY, TINY_HYBRID, ZonosConfig
from models.zonos.speaker import write_speaker_model

PRESET_VERSION = "v3"  # bump when what the writers produce changes

# descript/dac_44khz's config.json; the tiny one keeps its strides (512 samples a frame).
REAL_DAC = {
    "encoder_hidden_size": 64,
    "downsampling_ratios": [2, 4, 8, 8],
    "decoder_hidden_size": 1536,
    "upsampling_ratios": [8, 8, 4, 2],
    "n_codebooks": 9,
    "codebook_size": 1024,
    "codebook_dim": 8,
    "hidden_size": 1024,
    "sampling_rate": 44100,
}
TINY_DAC = {**REAL_DAC, "encoder_hidden_size": 8, "decoder_hidden_size": 32, "hidden_size": 16}


def write_dac_checkpoint(folder: Path, cfg: dict, seed: int) -> None:
    from transformers import DacConfig, DacModel

    from models.codecs.dac import make_audible

    torch.manual_seed(seed)
    make_audible(DacModel(DacConfig(**cfg)).eval(), seed).save_pretrained(str(folder))


def _writer(config: ZonosConfig, dac: dict, speaker_width: int):
    def write(folder: Path) -> None:
        write_zonos_checkpoint(folder / "model", config, seed=0)
        write_dac_checkpoint(folder / "model" / "dac", dac, seed=1)
        write_speaker_model(folder / "model" / "speaker", speaker_width, seed=2)

    return write


def ensure_tiny_zonos(root: Path | None = None) -> Path:
    """The preset's folder (its `model/` holds the checkpoint, `dac/` and `speaker/`)."""
    return materialise(f"tiny-zonos-{PRESET_VERSION}", _writer(TINY, TINY_DAC, 4), root)


def ensure_random_zonos(root: Path | None = None) -> Path:
    """Zonos v0.1 transformer's real shapes (1.6B parameters, ~6.5 GB in fp32) and real DAC."""
    return materialise(f"zonos-v0.1-random-{PRESET_VERSION}", _writer(REAL, REAL_DAC, 64), root)


def ensure_tiny_zonos_hybrid(root: Path | None = None) -> Path:
    """The hybrid scaled down (config.TINY_HYBRID), with tiny-zonos' DAC and speaker model
    (copied from that preset, written first if need be: the same seeds give the same files)."""

    def write(folder: Path) -> None:
        write_zonos_checkpoint(folder / "model", TINY_HYBRID, seed=0)
        tiny = ensure_tiny_zonos(root) / "model"
        for part in ("dac", "speaker"):
            shutil.copytree(tiny / part, folder / "model" / part)

    return materialise(f"tiny-zonos-hybrid-{PRESET_VERSION}", write, root)


def ensure_random_zonos_hybrid(root: Path | None = None) -> Path:
    """Zonos v0.1 hybrid's real shapes (46 layers, 12 of them attention) and real DAC."""
    return materialise(
        f"zonos-v0.1-hybrid-random-{PRESET_VERSION}", _writer(REAL_HYBRID, REAL_DAC, 64), root
    )
