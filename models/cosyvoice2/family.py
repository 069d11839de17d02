"""CosyVoice 2 in the family table (models/families.py), with its load-time options."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from engine.request import SettingError
from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.serving_options import FlowHiftLaneOptions
from models.cosyvoice2.config import CONFIG_FILE
from models.family_spec import Checkpoint, LoadRequest, ModelFamily, option

PRESETS = {
    "tiny-cosyvoice2": "CosyVoice 2 scaled down (flow + HiFT, ONNX stand-ins), seeded random "
    "weights",
    "cosyvoice2-0.5b": "FunAudioLLM/CosyVoice2-0.5B (Qwen2 LM, flow matching, HiFT)",
}


@dataclass(frozen=True)
class CosyVoiceLoadOptions(FlowHiftLaneOptions):
    first_hop_tokens: int | None = option(
        None,
        "--first-hop-tokens",
        "CosyVoice 2's first chunk in speech tokens, 5-25 (default: 20; 25 = CosyVoice's own "
        "streaming). Smaller: sooner first audio, less of it to cover the next chunk "
        "(docs/models.md)",
        metavar="N",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.first_hop_tokens is not None and self.first_hop_tokens < 1:
            raise SettingError("first_hop_tokens", "must be >= 1", self.first_hop_tokens)


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.local is not None and (checkpoint.local / CONFIG_FILE).exists()


def _require_extra() -> None:
    missing = [
        m for m in ("transformers", "yaml", "onnxruntime") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise CheckpointError(
            f"CosyVoice 2 needs {', '.join(missing)} (its tokenizer, YAML config and ONNX voice "
            "encoders): pip install 'voxgate[cosyvoice2]'"
        )


def _load(request: LoadRequest):
    _require_extra()
    from models.cosyvoice2 import configs
    from models.cosyvoice2.loading import load_cosyvoice2
    from models.cosyvoice2.presets import ensure_real_config, ensure_tiny_cosyvoice2

    model, device, dtype = request.model, request.device, request.dtype
    first_hop = request.options.first_hop_tokens
    if model == "tiny-cosyvoice2":
        source, name, random = str(ensure_tiny_cosyvoice2()), model, False
    elif model == "cosyvoice2-0.5b":
        # With --random-weights, the real configuration and nothing downloaded.
        random = request.random_weights
        source, name = (str(ensure_real_config()) if random else configs.REPO_ID), model
    else:
        source, name, random = model, None, False
    loaded = load_cosyvoice2(
        source,
        device,
        dtype,
        name=name,
        random_weights=random,
        first_hop=first_hop,
        flow_dtype=request.options.flow_dtype(dtype),
    )
    if request.voices_dir is not None:
        loaded.add_voices_dir(request.voices_dir)
    return request.options.apply(loaded)


FAMILY = ModelFamily(
    name="CosyVoice 2",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="CosyVoice 2: a folder with cosyvoice2.yaml",
    options=CosyVoiceLoadOptions,
    own_codec="their own flow + HiFT codec",
    takes_voices=True,
    random_layouts=frozenset({"cosyvoice2-0.5b"}),
    seeded_presets=frozenset({"tiny-cosyvoice2"}),
)
