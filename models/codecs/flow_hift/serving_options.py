"""The load-time options every family with a flow + HiFT codec takes (CosyVoice 2, Chatterbox,
Step-Audio 2's token2wav): how the engine runs that codec's CUDA graphs and the precision its
flow loads in; and those of the text-to-speech ones that stream through the engine's
first-chunk lane (CosyVoice 2, Chatterbox). A family's options dataclass is one of these or a
subclass of one; `voxgate serve` offers each option once, in a group naming every family that
takes it (models/families.py, option_fields).

Light: no torch, so the CLI can read the options for its help."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.request import SettingError
from models.codecs.compile_option import CodecCompileOption
from models.codecs.lane_option import FirstChunkLaneOption
from models.family_spec import option

if TYPE_CHECKING:  # the CLI reads these options without loading torch
    import torch


@dataclass(frozen=True)
class FlowHiftOptions(CodecCompileOption):
    """The defaults are ModelFacts' (codec_pacing, compile_codec): a model loaded without its
    family's options serves as with them."""

    codec_pacing: bool = option(
        True,
        "--codec-pacing",
        "CUDA: codec threads wait for each graph of a job (one per Euler step of the flow) "
        "before queueing the next, so the LLM's launches never wait behind a whole queued job",
    )

    flow_float32: bool = option(
        False,
        "--flow-float32",
        "the flow-matching decoder in float32 (TF32 GEMMs on CUDA) instead of the model's "
        "--dtype (bfloat16 on GPUs, float32 on the CPU); HiFT is float32 either way. For "
        "comparing precisions: bfloat16 makes a steady chunk cheaper",
    )

    def serving_facts(self) -> dict[str, Any]:
        """The ModelFacts fields these options set (dataclasses.replace keywords)."""
        return {"codec_pacing": self.codec_pacing, "compile_codec": self.compile_codec}

    def flow_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype the family loads its flow in, given the model's `dtype`."""
        import torch

        return torch.float32 if self.flow_float32 else dtype

    def apply(self, model: Any) -> Any:
        """`model` (a loaded SpeechModel) with its facts saying how to serve it; returned."""
        model.facts = dataclasses.replace(model.facts, **self.serving_facts())
        return model


# A steady flow + HiFT job's cost is mostly its ~14,000 kernel launches, whatever its rows: on
# the H200, CosyVoice 2's took 66 ms at 8 rows and 163 ms at 32, against ~50 ms at 1. At 8 req/s
# steady jobs ran back to back with 3 rows at the median while listeners held 1.9 s of audio
# (docs/benchmark-history.md); batching them frees the GPU for the LLM.
STEADY_BATCH_ROWS = 16


@dataclass(frozen=True)
class FlowHiftLaneOptions(FlowHiftOptions, FirstChunkLaneOption):
    """The text-to-speech flow + HiFT families' (CosyVoice 2, Chatterbox): their first chunks
    decoded on a lane of their own, and steady jobs that wait for rows."""

    steady_batch_rows: int = option(
        STEADY_BATCH_ROWS,
        "--steady-batch-rows",
        "with the first-chunk lane: a steady codec job waits for N streams' chunks unless a "
        "listener needs one soon (0: never waits)",
        metavar="N",
    )

    def __post_init__(self) -> None:
        if self.steady_batch_rows < 0:
            raise SettingError("steady_batch_rows", "must be >= 0", self.steady_batch_rows)

    def serving_facts(self) -> dict[str, Any]:
        return {
            **super().serving_facts(),
            "first_chunk_lane": self.first_chunk_lane,
            "steady_batch_rows": self.steady_batch_rows,
        }
