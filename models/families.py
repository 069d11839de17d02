"""The table of model families. Each family lives in its folder's `family.py` (a ModelFamily:
presets, checkpoint recognition, loader, options, serving defaults); adding one is that file
and one line in FAMILIES (docs/models.md, "Adding a model family").

Light: imports no torch, so `voxgate serve --help` can list the families' options."""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from models.chatterbox.family import FAMILY as CHATTERBOX
from models.checkpoint_errors import CheckpointError
from models.cosyvoice2.family import FAMILY as COSYVOICE2
from models.csm.family import FAMILY as CSM
from models.family_spec import Checkpoint, ModelFamily
from models.glm_voice.family import FAMILY as GLM_VOICE
from models.moshi.family import FAMILY as MOSHI
from models.orpheus.family import FAMILY as ORPHEUS
from models.qwen3_tts.family import FAMILY as QWEN3_TTS
from models.step_audio2.family import FAMILY as STEP_AUDIO2
from models.voxgate_tiny.family import FAMILY as VOXGATE_TINY
from models.zonos.family import FAMILY as ZONOS

# Checkpoints are recognised in this order: a family that looks at local files only (CosyVoice
# 2's folder layout) before those that read config.json (which a Hub repo id downloads).
FAMILIES: tuple[ModelFamily, ...] = (
    COSYVOICE2,
    CHATTERBOX,
    GLM_VOICE,
    STEP_AUDIO2,
    MOSHI,
    VOXGATE_TINY,
    CSM,
    ZONOS,
    QWEN3_TTS,
    ORPHEUS,
)


def all_presets() -> dict[str, str]:
    """Every preset name → its one-line description, in table order."""
    return {name: text for family in FAMILIES for name, text in family.presets.items()}


def tool_call_families() -> str:
    """The families trained with function calling and their presets, for error messages."""
    named = [
        f"{f.name} ({', '.join(f.presets)})" if f.presets else f.name
        for f in FAMILIES
        if f.tool_calls
    ]
    return "; ".join(named) or "none"


def names_text(names: list[str]) -> str:
    """ "CosyVoice 2", "CosyVoice 2 and CSM", "CosyVoice 2, CSM and Zonos" …"""
    if not names:
        return "none"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def codec_families() -> str:
    """The families whose models take --codec, for help and errors."""
    return names_text([f.name for f in FAMILIES if f.takes_codec])


def cloning_families() -> str:
    """The families whose models make voices from reference clips (--voices-dir, clients'
    clips), for help and errors: "CosyVoice 2, Chatterbox, CSM, Zonos and Qwen3-TTS Base"."""
    return names_text([f.cloning_name for f in FAMILIES if f.takes_voices])


def random_layouts() -> list[str]:
    """Every preset whose real layout --random-weights builds, in table order."""
    return [name for f in FAMILIES for name in f.presets if name in f.random_layouts]


def family_of(model: str) -> ModelFamily:
    """The family of `model` (a preset, a checkpoint folder or a Hub repo id, which is fetched
    to read its config), or CheckpointError saying what Voxgate knows."""
    family = _find(model, Checkpoint(model, fetch=True))
    if family is None:
        raise CheckpointError(
            f"{model!r} is not a model Voxgate knows: presets are {', '.join(all_presets())}; "
            "a folder or repo id must hold a supported checkpoint ("
            + "; ".join(f.checkpoint_hint for f in FAMILIES if f.recognises)
            + ")"
        )
    return family


def known_family(model: str) -> ModelFamily | None:
    """The family of `model` from what is on this machine (a preset or a local folder), or None:
    never downloads and never raises. The engine's serving defaults are chosen with it before
    the model loads (engine/factory.py)."""
    try:
        return _find(model, Checkpoint(model, fetch=False))
    except (CheckpointError, OSError):  # family_of, at load, says what is wrong
        return None


def _find(model: str, checkpoint: Checkpoint) -> ModelFamily | None:
    for family in FAMILIES:
        if model in family.presets:
            return family
    _check_source(model)
    for family in FAMILIES:
        if family.recognises is not None and family.recognises(checkpoint):
            return family
    return None


def _check_source(model: str) -> None:
    """Refuse, naming what is at fault, a name that is not a preset and cannot be a checkpoint:
    a folder this user cannot read (rather than the first file a family looks for in it), or a
    plain name that is no folder here (a mistyped preset, rather than "no checkpoint folder")."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "this user cannot read the folder", str(path))
        return
    if path.exists() or "/" in model or model.startswith((".", "~")):
        return  # a file, a path or a repo id: the loader says what is wrong with it
    presets = list(all_presets())
    near = difflib.get_close_matches(model, presets, n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise CheckpointError(
        f"{model!r} is neither a preset nor a checkpoint folder (nor a Hugging Face repo id like "
        f"owner/name): {hint}presets are {', '.join(presets)}"
    )


def option_fields() -> Iterator[tuple[tuple[ModelFamily, ...], dataclasses.Field]]:
    """Every family's own options, each once with the families that take it (the command line
    offers each once; the flow + HiFT families share theirs)."""
    owners: dict[str, list[ModelFamily]] = {}
    specs: dict[str, dataclasses.Field] = {}
    for family in FAMILIES:
        for spec in dataclasses.fields(family.options):
            owners.setdefault(spec.name, []).append(family)
            specs.setdefault(spec.name, spec)
    for name, spec in specs.items():
        yield tuple(owners[name]), spec


def option_owners(name: str) -> tuple[tuple[ModelFamily, ...], dataclasses.Field]:
    """The families that take the option `name`, and its field."""
    for owners, spec in option_fields():
        if spec.name == name:
            return owners, spec
    raise CheckpointError(f"no model family has an option {name!r}")


def owners_text(owners: tuple[ModelFamily, ...]) -> str:
    """ "CosyVoice 2", "CosyVoice 2, Chatterbox and Step-Audio 2" …"""
    return names_text([family.name for family in owners])


def check_load_options(given: dict) -> dict:
    """`given` (load-time option name → value), each value checked by its own family's options
    before any model loads, so a bad one stops `voxgate serve` at once with the family's
    message (a ValueError). Which family serves is only known at load, where that family's
    make_options refuses another family's option (models/registry.py)."""
    for name, value in given.items():
        owners, _ = option_owners(name)
        try:
            owners[0].options(**{name: value})
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    return given
