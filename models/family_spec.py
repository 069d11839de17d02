"""What a model family declares (models/families.py holds the table): how a name is recognised
as one of its models, how it is loaded, its own load-time options, the options it takes on
each request (models/request_options.py), and the serving defaults it asks of the engine.
Light: no torch at import, so the CLI can read the table for its help."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.checkpoint_errors import CheckpointError

if TYPE_CHECKING:
    import torch

    from models.base import SpeechModel


@dataclass(frozen=True)
class NoOptions:
    """The options of a family that takes none."""


def option(
    default: Any, flag: str, help: str, metavar: str | None = None, expert: bool = True
) -> Any:
    """A field of a family's options dataclass: its command-line flag and help travel with it,
    so `voxgate serve` offers it (gateway/settings.py; also as a voxgate.toml key and a
    VOXGATE_* variable) without a second definition. `expert`: listed apart in --help."""
    meta = {"flag": flag, "help": help, "metavar": metavar, "expert": expert}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ServingDefaults:
    """What a family asks of the engine for the settings a user leaves unset
    (engine/factory.py, serving_defaults). The defaults suit a model served on a GPU."""

    cpu_engine_process: bool = False  # on the CPU too, the engine in a process of its own
    cpu_int8: bool = False  # int8 weights on the CPU (SpeechModel.quantize_for_cpu)
    cpu_half_threads: bool = False  # torch threads on the CPU: half the cores, rest to the gateway


@dataclass(frozen=True)
class LoadRequest:
    """One load, as a family's `load` receives it."""

    model: str  # the name as given: a preset of the family, a folder or a Hub repo id
    codec: str | None  # a codec override (only a family with ModelFamily.takes_codec gets one)
    device: torch.device
    dtype: torch.dtype
    progress: bool
    random_weights: bool
    voices_dir: str | None  # only a family with ModelFamily.takes_voices gets one
    options: Any  # the family's options dataclass (NoOptions when it has none)


class Checkpoint:
    """A model name that is not a preset: a local folder or a Hub repo id. Its config.json is
    read once, when a family first asks; with `fetch=False` a repo id not on disk reads as
    unknown instead of being downloaded (the serving defaults are settled before any load)."""

    def __init__(self, source: str, fetch: bool = True) -> None:
        self.source = source
        self.fetch = fetch

    @cached_property
    def local(self) -> Path | None:
        path = Path(self.source).expanduser()
        return path if path.is_dir() else None

    @cached_property
    def config(self) -> dict | None:
        from models.loader import read_config, resolve_source

        if self.local is None and not self.fetch:
            return None
        return read_config(resolve_source(self.source))

    def model_type(self) -> str | None:
        config = self.config
        return None if config is None else config.get("model_type")


@dataclass(frozen=True)
class ModelFamily:
    """One family of models. `presets`: preset name → one-line description. `recognises`: whether
    a checkpoint (folder or repo id) is one of this family's, from its layout or config alone;
    None for a family served from its presets only. `checkpoint_hint` says what it looks for
    (the unknown-model error lists them). `load` builds the model; `options` is the dataclass of
    its own load-time options (fields made with `option`), `request_options` the dataclass of
    the options each request may set (fields made with `request_option`; the registry has its
    models announce them as ModelFacts.request_options).

    What a load may ask besides the model is declared here and checked once, before the
    family's `load` runs (models/registry.py): a family that declares nothing refuses --codec
    and --voices-dir."""

    name: str
    presets: Mapping[str, str]
    load: Callable[[LoadRequest], SpeechModel]
    recognises: Callable[[Checkpoint], bool] | None = None
    checkpoint_hint: str = ""
    options: type = NoOptions
    request_options: type = NoOptions
    serving: ServingDefaults = ServingDefaults()
    # --codec: its models take another codec (a repo id or folder) in place of their own.
    takes_codec: bool = False
    # The codec its checkpoints carry, as the refusal of --codec names it ("their own Mimi
    # codec"); read only when takes_codec is False.
    own_codec: str = "their own codec"
    # --voices-dir (and clients' clips, POST /v1/voices): its models make voices from reference
    # clips. `cloning_models` names them where only some of the family's do ("Qwen3-TTS Base").
    takes_voices: bool = False
    cloning_models: str = ""
    # --random-weights: the presets whose real layout it builds with seeded random weights
    # (benchmarks without the download), and those whose weights are seeded random already.
    # Every preset is one or the other; the flag on any other model is refused.
    random_layouts: frozenset[str] = frozenset()
    seeded_presets: frozenset[str] = frozenset()
    # Its models were trained with function calling (their facts name a tool_call_syntax);
    # the gateway names these families when another model is offered tools.
    tool_calls: bool = False

    @property
    def cloning_name(self) -> str:
        """The family's models that clone, as help and errors name them."""
        return self.cloning_models or self.name

    def option_names(self) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(self.options))

    def make_options(self, given: Mapping[str, Any], model: str) -> Any:
        """The family's options from the values a user set (name → value); an option of
        another family is refused, naming whose it is."""
        from models.families import option_owners, owners_text

        for name in given:
            if name not in self.option_names():
                owners, spec = option_owners(name)
                what = spec.metadata["help"].split(". ")[0]
                raise CheckpointError(
                    f"{spec.metadata['flag']} is for {owners_text(owners)} models ({what}); "
                    f"{model} is a {self.name} model, which takes no such option"
                )
        return self.options(**given)
