"""The `voxgate-tiny` preset: the trained weights shipped in the package, or (for benchmarks
before they exist, `--random-weights`) the same configuration with seeded random weights,
written once to `$VOXGATE_CACHE` in the published layout and loaded through the real loader."""

from __future__ import annotations

from pathlib import Path

from models.codecs.voxcodec import VoxCodecConfig
from models.preset_cache import materialise
from models.voxgate_tiny.checkpoint import write_random_checkpoint
from models.voxgate_tiny.config import tiny_config_dict
from models.voxgate_tiny.text import CharTokenizer

RANDOM_VERSION = "v3"  # bump when the default config or the random recipe changes


def ensure_random_voxgate_tiny(root: Path | None = None) -> Path:
    def write(folder: Path) -> None:
        config = tiny_config_dict(VoxCodecConfig(), CharTokenizer().vocab_size)
        write_random_checkpoint(folder, config, seed=1234)

    return materialise(f"voxgate-tiny-random-{RANDOM_VERSION}", write, root)
