"""Per-request model options: the knobs a model family takes on each request beyond the generic
`sampling` (Chatterbox's emotion exaggeration and classifier-free-guidance weight; Zonos'
conditioning and language, Qwen3-TTS' language and instruction).

An option is a number in a range (`request_option`) or text (`text_option`): one of a closed
set of `choices` (a language list) or free text of at most `max_chars` characters (an
instruction). A family declares them as a frozen dataclass whose fields are made with these
two helpers (its `family.py`, ModelFamily.request_options). The served model announces them
as `OptionSpec`s (ModelFacts.request_options, filled in by models/registry.py): plain data, so the gateway validates a client's
`model_options` and lists them in `session.started` without importing the family table, and
they cross the engine's process boundary as they are. A model may narrow what its family
declares to what its checkpoint holds (`OptionSpec.narrowed`: the languages of this
checkpoint). `resolve_request_options` is the one check, used by the gateway (to answer
`bad_field` before anything is queued) and by the engine (for callers that skip the gateway).

Light: no torch at import (family.py files import it)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NUMBER = "number"
TEXT = "text"
# A request's value for one option: a number option's float, a text option's string.
OptionValue = float | str
# Free text may break lines or hold tabs; every other control character is refused.
_ALLOWED_CONTROLS = frozenset("\t\n\r")
# An error lists a text option's choices in full up to this many; beyond, the default and a
# few others, and where to find them all.
_LISTED_CHOICES = 12
_EXAMPLE_CHOICES = 6


class RequestOptionError(ValueError):
    """A `model_options` entry the served model cannot take; `option` names it (None: the
    object as a whole). The message says what would be accepted."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class OptionSpec:
    """One per-request option, as clients discover it (`session.started.model_options`).
    kind NUMBER: `default`, `minimum`, `maximum` are numbers. kind TEXT: `default` is text,
    and either `choices` (the closed set, matched without regard to case) or `max_chars`."""

    name: str
    default: OptionValue
    minimum: float | None
    maximum: float | None
    help: str
    kind: str = NUMBER
    choices: tuple[str, ...] | None = None
    max_chars: int | None = None

    def announce(self) -> dict[str, Any]:
        """A number as it always was announced (name, default, minimum, maximum, help); text
        with `kind` and its `choices` or `max_chars`."""
        if self.kind == NUMBER:
            return {
                "name": self.name,
                "default": self.default,
                "minimum": self.minimum,
                "maximum": self.maximum,
                "help": self.help,
            }
        out: dict[str, Any] = {"name": self.name, "kind": TEXT, "default": self.default}
        if self.choices is not None:
            out["choices"] = list(self.choices)
        else:
            out["max_chars"] = self.max_chars
        out["help"] = self.help
        return out

    def narrowed(self, choices: tuple[str, ...], help: str | None = None) -> OptionSpec:
        """This text option with the choices one checkpoint has (which must hold the default),
        for the model to announce in place of its family's wider list."""
        if self.kind != TEXT or self.choices is None:
            raise ValueError(f"{self.name} is not a text option with choices")
        _check_choices(choices, str(self.default))
        return dataclasses.replace(self, choices=tuple(choices), help=help or self.help)

    def value(self, given: Any) -> OptionValue:
        """`given` checked → the value the model gets, or RequestOptionError naming the option
        and what it takes."""
        if self.kind == NUMBER:
            return self._number(given)
        return self._text(given)

    def _number(self, value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise RequestOptionError(
                f"model_options.{self.name} must be a number in [{self.minimum}, {self.maximum}]",
                self.name,
            )
        assert self.minimum is not None and self.maximum is not None
        if not self.minimum <= value <= self.maximum:
            raise RequestOptionError(
                f"model_options.{self.name} must be in [{self.minimum}, {self.maximum}] "
                f"({self.help}), got {value}",
                self.name,
            )
        return float(value)

    def _text(self, value: Any) -> str:
        if not isinstance(value, str):
            raise RequestOptionError(
                f"model_options.{self.name} must be text ({self._takes()}), "
                f"got {type(value).__name__}",
                self.name,
            )
        if self.choices is not None:
            by_case = {c.lower(): c for c in self.choices}
            chosen = by_case.get(value.lower())
            if chosen is None:
                # A likely typo is named (short values only: matching costs their length).
                near = (
                    difflib.get_close_matches(value.lower(), list(by_case), n=1)
                    if len(value) <= 64
                    else []
                )
                hint = f"; did you mean {by_case[near[0]]!r}?" if near else ""
                raise RequestOptionError(
                    f"model_options.{self.name} must be {self._takes()} ({self.help}), "
                    f"got {value[:64]!r}{hint}",
                    self.name,
                )
            return chosen
        assert self.max_chars is not None
        if len(value) > self.max_chars:
            raise RequestOptionError(
                f"model_options.{self.name} is limited to {self.max_chars} characters "
                f"({self.help}), got {len(value)}",
                self.name,
            )
        bad = next((c for c in value if _is_control(c)), None)
        if bad is not None:
            raise RequestOptionError(
                f"model_options.{self.name} must not hold control characters (got "
                f"U+{ord(bad):04X} at {value.index(bad)}); tabs and line breaks are fine",
                self.name,
            )
        return value

    def _takes(self) -> str:
        """What a text option accepts, in words."""
        if self.choices is None:
            return f"at most {self.max_chars} characters"
        if len(self.choices) <= _LISTED_CHOICES:
            return "one of " + ", ".join(self.choices)
        others = [c for c in self.choices if c != self.default]
        examples = ", ".join([str(self.default), *others[: _EXAMPLE_CHOICES - 1]])
        return (
            f"one of the {len(self.choices)} that session.started.model_options lists, "
            f"e.g. {examples}"
        )


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" and char not in _ALLOWED_CONTROLS


def _check_choices(choices: tuple[str, ...], default: str) -> None:
    if not choices or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("choices must be non-empty text")
    if len({c.lower() for c in choices}) != len(choices):
        raise ValueError("choices must differ other than by case")
    if default not in choices:
        raise ValueError(f"default {default!r} is not one of the choices")


def request_option(default: float, minimum: float, maximum: float, help: str) -> Any:
    """A field of a family's request-options dataclass: a number in [minimum, maximum], with
    the value the model uses when a request leaves it unset."""
    if not minimum <= default <= maximum:
        raise ValueError(f"default {default} outside [{minimum}, {maximum}]")
    meta = {"minimum": minimum, "maximum": maximum, "help": help}
    return field(default=default, metadata=meta)


def text_option(
    default: str,
    *,
    choices: tuple[str, ...] | None = None,
    max_chars: int | None = None,
    help: str,
) -> Any:
    """A text field of a family's request-options dataclass: one of `choices` (a closed set,
    e.g. languages) or free text of at most `max_chars` characters (e.g. an instruction);
    `default` is what the model uses when a request leaves it unset."""
    if (choices is None) == (max_chars is None):
        raise ValueError("give a text option either choices or max_chars")
    if choices is not None:
        choices = tuple(choices)
        _check_choices(choices, default)
    elif max_chars is None or max_chars < 1 or len(default) > max_chars:
        raise ValueError(f"max_chars must be at least 1 and hold the default ({max_chars})")
    meta = {"kind": TEXT, "choices": choices, "max_chars": max_chars, "help": help}
    return field(default=default, metadata=meta)


def option_specs(options: type) -> tuple[OptionSpec, ...]:
    """The specs of a request-options dataclass's fields, in declaration order."""
    specs = []
    for f in dataclasses.fields(options):
        meta = f.metadata
        if meta.get("kind", NUMBER) == TEXT:
            spec = OptionSpec(
                f.name,
                f.default,
                None,
                None,
                meta["help"],
                TEXT,
                meta["choices"],
                meta["max_chars"],
            )
        else:
            spec = OptionSpec(f.name, f.default, meta["minimum"], meta["maximum"], meta["help"])
        specs.append(spec)
    return tuple(specs)


def same_options(announced: tuple[OptionSpec, ...], declared: tuple[OptionSpec, ...]) -> bool:
    """Whether a model announces the options its family declares: the same names, kinds and
    defaults in order (a model may narrow a text option's choices and help to its checkpoint)."""

    def shape(specs: tuple[OptionSpec, ...]) -> list[tuple[str, str, OptionValue]]:
        return [(s.name, s.kind, s.default) for s in specs]

    return shape(announced) == shape(declared)


def resolve_request_options(
    specs: tuple[OptionSpec, ...], given: Mapping[str, Any], model: str
) -> dict[str, OptionValue]:
    """`given` (a client's `model_options`) checked against `specs` → every option's value,
    the defaults filled in (a text choice in the case its spec spells it). RequestOptionError
    names the first unknown option or bad value and what is accepted; a model that takes no
    options refuses any."""
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
                f"unknown model option {str(name)[:64]!r} for {model}{_near(str(name), by_name)}; "
                f"it takes: {known}",
                str(name),
            )
    return {spec.name: spec.value(given.get(spec.name, spec.default)) for spec in specs}


def _near(name: str, known: Mapping[str, Any]) -> str:
    """` (did you mean 'emotion_happiness'?)` for the known name closest to a mistyped one, or
    nothing (short names only: matching costs their length)."""
    near = difflib.get_close_matches(name, list(known), n=1) if len(name) <= 64 else []
    return f" (did you mean {near[0]!r}?)" if near else ""
