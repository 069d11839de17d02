"""The load-time option of every family whose codec streams through the engine's first-chunk
lane (CosyVoice 2 and Chatterbox's flow + HiFT, Qwen3-TTS's 12 Hz decoder):
`--first-chunk-lane`, one flag on `voxgate serve` for all of them (models/families.py offers
a field shared by name once, naming each family that takes it).

Light: no torch, so the CLI can read it for its help."""

from __future__ import annotations

from dataclasses import dataclass

from models.family_spec import option


@dataclass(frozen=True)
class FirstChunkLaneOption:
    """The default is the families' ModelFacts.first_chunk_lane: a model loaded without its
    family's options serves as with them."""

    first_chunk_lane: bool = option(
        True,
        "--first-chunk-lane",
        "CUDA: decode first chunks (and chunks whose listener would run dry) on a detokenizer "
        "lane of their own while a steady job runs (docs/engine.md)",
    )
