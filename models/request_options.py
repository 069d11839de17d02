"""Per-request model options: the knobs a model family takes on each request beyond the generic
`sampling` (Chatterbox's emotion exaggeration and classifier-free-guidance weight; Zonos'
conditioning, Qwen3-TTS' instruction…).

A family declares them as a frozen dataclass whose fields are made with `request_option` (its
`family.py`, ModelFamily.request_options). The served model announces them as `OptionSpec`s
(ModelFacts.request_options): plain data, so the gateway validates a client's `model_options`
and lists them in `session.started` without importing the family table, and they cross the
engine's process boundary as they are. `resolve_request_options` is the one check, used by
the gateway (to answer `bad_field` before anything is queued) and by the engine (for callers
that skip the gateway).

Light: no torch at import (family.py files import it)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class RequestOptionError(ValueError):
    """A `model_options` entry the served model cannot take; `option` names it (None: the
    object as a whole). The message says what would be accepted."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class OptionSpec:
    """One per-request option, as clients discover it (`session.started.model_options`)."""

    name: str
    default: float
    minimum: float
    maximum: float
    help: str

    def announce(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def request_option(default: float, minimum: float, maximum: float, help: str) -> Any:
    """A field of a family's request-options dataclass: a number in [minimum, maximum], with
    the value the model uses when a request leaves it unset."""
    if not minimum <= default <= maximum:
        raise ValueError(f"default {default} outside [{minimum}, {maximum}]")
    meta = {"minimum": minimum, "maximum": maximum, "help": help}
    return field(default=default, metadata=meta)


def option_specs(options: type) -> tuple[OptionSpec, ...]:
    """The specs of a request-options dataclass's fields, in declaration order."""
    return tuple(
        OptionSpec(
            f.name, f.default, f.metadata["minimum"], f.metadata["maximum"], f.metadata["help"]
        )
        for f in dataclasses.fields(options)
    )


def resolve_request_options(
    specs: tuple[OptionSpec, ...], given: Mapping[str, Any], model: str
) -> dict[str, float]:
    """`given` (a client's `model_options`) checked against `specs` → every option's value,
    the defaults filled in. RequestOptionError names the first unknown option or bad value and
    what is accepted; a model that takes no options refuses any."""
    if not isinstance(given, Mapping):
        raise RequestOptionError("`model_options` must be an object")
    by_name = {spec.name: spec for spec in specs}
    for name in given:
        if name not in by_name:
            if not specs:
                raise RequestOptionError(
                    f"{model} takes no model_options (got {str(name)[:64]!r})", str(name)
                )
            known = ", ".join(by_name)
            raise RequestOptionError(
                f"unknown model option {str(name)[:64]!r} for {model}; it takes: {known}",
                str(name),
            )
    values = {}
    for spec in specs:
        value = given.get(spec.name, spec.default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise RequestOptionError(
                f"model_options.{spec.name} must be a number in [{spec.minimum}, {spec.maximum}]",
                spec.name,
            )
        if not spec.minimum <= value <= spec.maximum:
            raise RequestOptionError(
                f"model_options.{spec.name} must be in [{spec.minimum}, {spec.maximum}] "
                f"({spec.help}), got {value}",
                spec.name,
            )
        values[spec.name] = float(value)
    return values
