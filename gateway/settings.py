"""`voxgate serve`'s options, each defined once: as a field of GatewaySettings or EngineConfig
with `cli(...)` metadata (engine/config.py), or as a model family's option (models/families.py).
From those fields come the command line, the keys of an optional TOML file (`--config PATH`)
and the VOXGATE_* environment variables. Precedence: command line > environment > file >
the field's default. Values are validated where they land (GatewaySettings, EngineConfig, the
family's options), so every source gets the same one-line errors.

A key is the long option without its dashes, `-` as `_`: `--max-num-seqs` is `max_num_seqs`
in the file and VOXGATE_MAX_NUM_SEQS in the environment. A field may also name a variable of its
own (`--api-key`: VOXGATE_API_KEY and VOXGATE_API_KEYS; keys from both are accepted). A
VOXGATE_* variable that is neither a setting nor in OTHER_ENVIRONMENT is reported at start-up
(unknown_environment), never refused.

Light: no torch and no server stack, so `voxgate --help` stays fast."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import tomllib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.request import ConfigError, SettingError
from gateway.config import GatewaySettings
from models.families import check_load_options, option_fields, owners_text

TWILIO_TOKEN_ENV = "VOXGATE_TWILIO_AUTH_TOKEN"  # a secret: environment only, never a flag

# The VOXGATE_* variables read elsewhere than the settings (the secret above, the preset cache,
# model families' checkpoints, test switches and compose files), so that start-up does not
# report them as unknown. tests/gateway/test_settings.py checks that every VOXGATE_* name in
# the repository is a setting or listed here.
OTHER_ENVIRONMENT = frozenset(
    {
        TWILIO_TOKEN_ENV,
        "VOXGATE_CACHE",  # models/preset_cache.py: where presets are written
        "VOXGATE_STEP_AUDIO2_MINI",  # models/step_audio2/family.py: checkpoints and voice
        "VOXGATE_STEP_AUDIO2_PROMPT_WAV",
        "VOXGATE_STEP_AUDIO2_TOKEN2WAV",
        "VOXGATE_GLM_VOICE_9B",  # models/glm_voice/family.py: checkpoints
        "VOXGATE_GLM_VOICE_TOKENIZER",
        "VOXGATE_GLM_VOICE_DECODER",
        "VOXGATE_RAY_HEAD",  # docker-compose.yml: the Ray head a worker joins
        "VOXGATE_REFERENCE_DIR",  # tests: reference implementations, the soak, screenshots
        "VOXGATE_SOAK_S",
        "VOXGATE_RELIABILITY_FULL",
        "VOXGATE_RELIABILITY_SERVE",  # tests/reliability: the crash tests' server, on a GPU too
        "VOXGATE_RELIABILITY_KILL_SESSIONS",
        "VOXGATE_BROWSER_SCREENSHOT",
    }
)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Option:
    """One `voxgate serve` option and where its value goes."""

    key: str  # file key; VOXGATE_<KEY upper> in the environment
    target: str  # "gateway", "engine" or "model": GatewaySettings, EngineConfig, family options
    attr: str  # the field it sets
    kind: type  # bool, int, float, str, or tuple (repeatable strings)
    default: Any
    meta: Mapping[str, Any]

    @property
    def flag(self) -> str:
        return self.meta["flag"]

    @property
    def envs(self) -> tuple[str, ...]:
        """Its variables: VOXGATE_<KEY upper>, then the field's own name where it has one."""
        rule = f"VOXGATE_{self.key.upper()}"
        return tuple(dict.fromkeys((rule, self.meta.get("env") or rule)))

    @property
    def group(self) -> str:
        return self.meta.get("group", "engine")

    @property
    def expert(self) -> bool:
        return bool(self.meta.get("expert", True))

    def field_value(self, value: Any) -> Any:
        """The value as its field holds it (`--eager` sets cuda_graphs False)."""
        if self.kind is tuple:
            return tuple(value)
        return (not value) if self.meta.get("invert") else value


def _kind(hint: Any) -> type:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = typing.get_origin(hint) or hint
    if base is tuple:
        return tuple
    if args and typing.get_origin(hint) is not tuple:
        return _kind(args[0])
    return base


def _fields(cls: type, target: str) -> Iterator[Option]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "flag" not in f.metadata:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        key = f.metadata["flag"].lstrip("-").replace("-", "_")
        yield Option(key, target, f.name, _kind(hints[f.name]), default, f.metadata)


def options() -> list[Option]:
    """Every option, in --help order: the model and network groups a user needs first, then
    the expert ones."""
    found = [*_fields(GatewaySettings, "gateway"), *_fields(EngineConfig, "engine")]
    for families, f in option_fields():
        meta = {"group": f"{owners_text(families)} models", "expert": True, **f.metadata}
        hint = typing.get_type_hints(families[0].options)[f.name]
        key = f.metadata["flag"].lstrip("-").replace("-", "_")
        found.append(Option(key, "model", f.name, _kind(hint), f.default, meta))
    return sorted(found, key=lambda o: o.expert)  # stable: groups keep their own order


# --- the command line -------------------------------------------------------------------------


def add_options(parser: argparse.ArgumentParser) -> None:
    """One argparse option per setting, grouped as --help shows them. Defaults are SUPPRESSed:
    what the namespace holds is exactly what the command line gave."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="read settings from this TOML file (keys: the long options with _ for -, e.g. "
        "max_num_seqs = 64); the command line and VOXGATE_* variables override it",
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in options():
        title = f"expert: {option.group}" if option.expert else option.group
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        groups[title].add_argument(option.flag, dest=option.key, **_argparse_kwargs(option))


def _argparse_kwargs(option: Option) -> dict:
    help = option.meta["help"]
    if option.default not in (None, ()) and "default" not in help:
        shown = option.default
        if option.kind is bool:  # the flag's own default: --eager is off while graphs are on
            shown = "on" if option.field_value(option.default) else "off"
        help = f"{help} (default: {shown})"
    kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": help.replace("%", "%%")}
    if option.kind is bool:
        switch = option.meta.get("switch")
        kwargs["action"] = "store_true" if switch else argparse.BooleanOptionalAction
    elif option.kind is tuple:
        kwargs["action"] = "append"
    else:
        kwargs["type"] = option.kind
    if option.kind is not bool:
        if option.meta.get("choices") is not None:
            kwargs["choices"] = option.meta["choices"]
        else:
            kwargs["metavar"] = option.meta.get("metavar") or _METAVARS.get(option.kind)
    return kwargs


_METAVARS = {int: "N", float: "X"}


# --- the file and the environment -------------------------------------------------------------


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings in a TOML file, by key; an unknown key or a value of the wrong type is a
    ConfigError naming the file, the key and what it accepts."""
    path = Path(path).expanduser()
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    by_key = {o.key: o for o in options()}
    values = {}
    for name, value in raw.items():
        key = name.replace("-", "_")
        if key not in by_key:
            near = difflib.get_close_matches(key, by_key, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(
                f"{path}: unknown setting {name!r}{hint}; keys are `voxgate serve`'s long options "
                "with _ for - (voxgate serve --help lists them)"
            )
        values[key] = _checked(by_key[key], value, f"{path}: {name}")
    return values


def _checked(option: Option, value: Any, where: str) -> Any:
    kind = option.kind
    if kind is tuple and isinstance(value, str):
        value = [value]
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        tuple: isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[kind]
    if not ok:
        wanted = {tuple: "a list of strings", bool: "true or false"}.get(kind, kind.__name__)
        raise ConfigError(f"{where} must be {wanted}, got {value!r}")
    return float(value) if kind is float else value


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as VOXGATE_* variables (others are left alone: VOXGATE_CACHE …). An
    option with two variables takes the first one set, or, for a `merge` option (API keys),
    the values of both."""
    values: dict[str, Any] = {}
    for option in options():
        given = [_parsed(option, environ[n], n) for n in option.envs if environ.get(n)]
        if not given:  # unset, or set empty (as compose files leave them): not given
            continue
        if option.meta.get("merge"):
            values[option.key] = [v for vs in given for v in vs]
        else:
            values[option.key] = given[0]
    return values


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """One line per VOXGATE_* variable that nothing reads (a mistyped name), with the closest
    known name: start-up logs them rather than refusing to start."""
    known = {name for option in options() for name in option.envs} | OTHER_ENVIRONMENT
    lines = []
    for name in sorted(environ):
        if not name.startswith("VOXGATE_") or name in known:
            continue
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        lines.append(
            f"${name} is not a voxgate setting and is ignored: {hint}A setting's variable is "
            "VOXGATE_ and its long option in capitals with _ for - (voxgate serve --help)"
        )
    return lines


def _parsed(option: Option, raw: str, name: str) -> Any:
    kind = option.kind
    if kind is tuple:
        return _split(raw)
    if kind is bool:
        word = raw.strip().lower()
        if word not in (*_TRUE, *_FALSE):
            raise ConfigError(f"${name} must be true or false (1/0, yes/no), got {raw!r}")
        return word in _TRUE
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"${name} must be {kind.__name__}, got {raw!r}") from None


def _split(raw: str) -> list[str]:
    """Repeatable values from one variable: comma- or whitespace-separated."""
    return [v for v in raw.replace(",", " ").split() if v]


# --- merged -----------------------------------------------------------------------------------


def merged_values(
    cli: Mapping[str, Any], environ: Mapping[str, str], file: Mapping[str, Any]
) -> dict[str, Any]:
    """Each key's value from the first source that has it (command line, environment, file);
    a `merge` option (API keys) gathers every source's values, duplicates dropped."""
    sources = (cli, read_environment(environ), file)
    values: dict[str, Any] = {}
    for option in options():
        given = [source[option.key] for source in sources if option.key in source]
        if not given:
            continue
        if option.meta.get("merge"):
            values[option.key] = list(dict.fromkeys(v for vs in given for v in vs))
        else:
            values[option.key] = given[0]
    return values


def settings_from_values(values: Mapping[str, Any], environ: Mapping[str, str]) -> GatewaySettings:
    """The merged values → validated GatewaySettings (raises ConfigError, a ValueError)."""
    engine, gateway, model = {}, {}, {}
    into = {"engine": engine, "gateway": gateway, "model": model}
    for option in options():
        if option.key in values:
            into[option.target][option.attr] = option.field_value(values[option.key])
    token = environ.get(TWILIO_TOKEN_ENV) or None
    return GatewaySettings(
        **gateway,
        engine=EngineConfig(**engine, load_options=_family_checked(model)),
        twilio_auth_token=token,
    )


def _family_checked(load_options: dict[str, Any]) -> dict[str, Any]:
    """The model families' load-time options, each checked by its family (ConfigError)."""
    try:
        return check_load_options(load_options)
    except SettingError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_settings(
    cli: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_path: str | None = None,
) -> GatewaySettings:
    """The settings from the command line's values (by key), the environment and the file; a
    refused value is a ConfigError naming the option as the user set it (_given_as)."""
    environ = os.environ if environ is None else environ
    file = read_config_file(config_path) if config_path else {}
    try:
        return settings_from_values(merged_values(cli, environ, file), environ)
    except SettingError as exc:
        option = next((o for o in options() if o.attr == exc.field), None)
        if option is None:  # a field that is no option (an embedder's): its own name
            raise
        where = _given_as(option, cli, environ, config_path if option.key in file else None)
        raise ConfigError(exc.named(where)) from None


def _given_as(
    option: Option, cli: Mapping[str, Any], environ: Mapping[str, str], file: str | None
) -> str:
    """The option as the source its value came from names it, with its flag: `--lead-ms`,
    `$VOXGATE_LEAD_MS (--lead-ms)`, `voxgate.toml: lead_ms (--lead-ms)` (`file`: the path of
    the file that gave it). A value no source gave (a default refused beside another
    setting's value) is named by its flag."""
    if option.key in cli:
        return option.flag
    variable = next((name for name in option.envs if environ.get(name)), None)
    if variable is not None:
        return f"${variable} ({option.flag})"
    if file is not None:
        return f"{file}: {option.key} ({option.flag})"
    return option.flag
