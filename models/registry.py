"""Model names → loaded models. A name is a preset, a local checkpoint folder, or a Hub repo id;
models/families.py says which family it belongs to and the family loads it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from models.base import SpeechModel
from models.families import all_presets, family_of
from models.family_spec import LoadRequest, ModelFamily
from models.load_checks import check_load, check_random_weights
from models.request_options import option_specs, same_options

DEFAULT_MODEL = "voxgate-tiny"  # the trained voice shipped in models/voxgate_tiny/weights

PRESETS: dict[str, str] = all_presets()  # preset name → one-line description


def load_model(
    model: str = DEFAULT_MODEL,
    codec: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: bool = False,
    random_weights: bool = False,
    voices_dir: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> SpeechModel:
    """Load `model` (preset name, folder or repo id). `codec` overrides the model's default codec
    (a repo id or folder). `random_weights` builds a preset's real configuration with seeded
    random weights instead of reading a checkpoint (benchmarks without the download).
    `voices_dir`: reference clips for voice prompting (the families with
    ModelFamily.takes_voices; others refuse it, as those without takes_codec refuse `codec`).
    `options`: the model family's own options the user set (name → value, e.g.
    {"first_hop_tokens": 12} for CosyVoice 2); another family's option is refused."""
    if random_weights:
        check_random_weights(model, PRESETS)
    family = family_of(model)
    check_load(family, model, codec, voices_dir, random_weights)
    request = LoadRequest(
        model=model,
        codec=codec,
        device=torch.device(device),
        dtype=dtype,
        progress=progress,
        random_weights=random_weights,
        voices_dir=voices_dir,
        options=family.make_options(dict(options or {}), model),
    )
    return with_request_options(family.load(request), family)


def with_request_options(model: SpeechModel, family: ModelFamily) -> SpeechModel:
    """`model`, announcing the request options its family declares (ModelFacts.
    request_options). A model that announces its own instead narrows the family's to its
    checkpoint (a Qwen3-TTS checkpoint's languages): the names, kinds and defaults must
    agree. The registry does this for every load; a model built without it takes none."""
    declared = option_specs(family.request_options)
    announced = model.facts.request_options
    if not announced:
        model.facts = dataclasses.replace(model.facts, request_options=declared)
    elif not same_options(announced, declared):
        raise RuntimeError(
            f"{family.name}: the model announces request options "
            f"{[(s.name, s.kind, s.default) for s in announced]} but its family.py declares "
            f"{[(s.name, s.kind, s.default) for s in declared]}; narrow the family's "
            "(OptionSpec.narrowed) or announce none"
        )
    return model
