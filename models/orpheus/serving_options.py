"""Orpheus' load-time options: how its SNAC codec serves (`voxgate serve --snac-…`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.request import SettingError
from models.checkpoint_errors import CheckpointError
from models.codecs.compile_option import CodecCompileOption
from models.family_spec import option

if TYPE_CHECKING:  # the CLI reads these options without loading torch
    import torch

LARGE_CHUNK_FRAMES = 8  # models/codecs/snac.py's default
MAX_LARGE_CHUNK_FRAMES = 16  # a call of 16 frames: the codec captures graphs of up to 64 rows of it


@dataclass(frozen=True)
class OrpheusLoadOptions(CodecCompileOption):
    snac_large_chunk_frames: int = option(
        LARGE_CHUNK_FRAMES,
        "--snac-large-chunk-frames",
        "SNAC frames (85 ms each) a listener with a comfortable buffer waits for, decoded in "
        "one call: larger costs the codec less a frame and the listener's buffer more"
        f" (4-{MAX_LARGE_CHUNK_FRAMES}; default {LARGE_CHUNK_FRAMES})",
        metavar="N",
    )
    snac_chunk_ramp: float = option(
        1.0,
        "--snac-chunk-ramp",
        "past its first chunk, a young stream's SNAC chunk holds at most this share of the "
        "audio already sent to it (0-1; default 1): below 1 its chunks come sooner while its "
        "buffer is small, for a loaded GPU whose frames take nearly their playback to make",
        metavar="X",
    )
    snac_fp16: bool = option(
        True,
        "--snac-fp16",
        "CUDA: decode SNAC in float16 (less GPU time a frame: more listeners hold), where the "
        "loaded weights decode a check's codes in it within 1 percent of float32's audio "
        "(else it stays float32, with a warning); --no-snac-fp16: float32",
    )

    def __post_init__(self) -> None:
        ramp = self.snac_chunk_ramp
        if not 0 < ramp <= 1:
            raise SettingError("snac_chunk_ramp", "must be in (0, 1]", ramp)
        n = self.snac_large_chunk_frames
        if not 4 <= n <= MAX_LARGE_CHUNK_FRAMES:
            rule = f"must be 4-{MAX_LARGE_CHUNK_FRAMES} (SNAC frames)"
            raise SettingError("snac_large_chunk_frames", rule, n)

    def apply(self, model: Any, device: torch.device) -> Any:
        """The loaded OrpheusModel with its codec serving as these options say; returned."""
        detok = model.detok
        if self.snac_fp16 and device.type == "cuda":
            from models.codecs.snac_precision import to_half_if_faithful

            to_half_if_faithful(detok.model)
        if self.snac_large_chunk_frames < detok.plan.chunk_frames:
            raise CheckpointError(
                f"--snac-large-chunk-frames must be at least the codec's chunk ({detok.plan.chunk_frames})"
            )
        detok.plan = dataclasses.replace(
            detok.plan,
            large_chunk_frames=self.snac_large_chunk_frames,
            chunk_ramp=self.snac_chunk_ramp,
        )
        large = model.facts.frame_tokens * detok.plan.large_chunk_frames
        model.facts = dataclasses.replace(
            model.facts, large_chunk_tokens=large, compile_codec=self.compile_codec
        )
        return model
