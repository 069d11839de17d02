"""The load-time options every family with a flow + HiFT codec takes (CosyVoice 2, Chatterbox,
Step-Audio 2's token2wav): how the engine runs that codec's CUDA graphs. A family's options
dataclass is this one or a subclass of it; `voxgate serve` offers each option once, in a group
naming every family that takes it (models/families.py, option_fields).

Light: no torch, so the CLI can read the options for its help."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from models.codecs.compile_option import CodecCompileOption
from models.family_spec import option


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

    def serving_facts(self) -> dict[str, Any]:
        """The ModelFacts fields these options set (dataclasses.replace keywords)."""
        return {"codec_pacing": self.codec_pacing, "compile_codec": self.compile_codec}

    def apply(self, model: Any) -> Any:
        """`model` (a loaded SpeechModel) with its facts saying how to serve it; returned."""
        model.facts = dataclasses.replace(model.facts, **self.serving_facts())
        return model
