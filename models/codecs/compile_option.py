"""The load-time option every family whose codec names blocks to compile takes (the flow +
HiFT families, Orpheus' SNAC): `--compile-codec`, one flag on `voxgate serve` for all of them
(models/families.py offers a field shared by name once, naming each family that takes it).

Light: no torch, so the CLI can read it for its help."""

from __future__ import annotations

from dataclasses import dataclass

from models.family_spec import option


@dataclass(frozen=True)
class CodecCompileOption:
    """The default is ModelFacts.compile_codec's: a model loaded without its family's options
    serves as with them."""

    compile_codec: bool = option(
        True,
        "--compile-codec",
        "CUDA: compile the codec's repeated blocks (a flow estimator's, SNAC's residual units) "
        "before capturing their graphs, for fewer, fused kernels (a cold start takes longer; a "
        "failed compile falls back to eager kernels)",
    )
