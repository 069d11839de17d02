"""Per-request model options (models/request_options.py): a family's typed options as the specs
its model announces, and the one check the gateway and the engine both apply."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from models.chatterbox.family import FAMILY as CHATTERBOX
from models.request_options import (
    RequestOptionError,
    option_specs,
    request_option,
    resolve_request_options,
)


@dataclass(frozen=True)
class Knobs:
    warmth: float = request_option(0.5, 0.0, 1.0, "how warm")
    pace: float = request_option(1.0, 0.5, 2.0, "speaking pace")


SPECS = option_specs(Knobs)


def test_defaults_fill_what_a_request_leaves_unset():
    assert resolve_request_options(SPECS, {}, "m") == {"warmth": 0.5, "pace": 1.0}
    assert resolve_request_options(SPECS, {"pace": 2}, "m") == {"warmth": 0.5, "pace": 2.0}
    assert [s.announce()["name"] for s in SPECS] == ["warmth", "pace"]


@pytest.mark.parametrize(
    ("given", "option", "says"),
    [
        (
            {"pace": 3.0},
            "pace",
            "model_options.pace must be in [0.5, 2.0] (speaking pace), got 3.0",
        ),
        ({"pace": "fast"}, "pace", "must be a number in [0.5, 2.0]"),
        ({"pace": True}, "pace", "must be a number"),
        ({"pace": float("nan")}, "pace", "must be a number"),
        ({"volume": 1}, "volume", "unknown model option 'volume' for m; it takes: warmth, pace"),
    ],
)
def test_bad_options_name_the_option_and_what_is_accepted(given, option, says):
    with pytest.raises(RequestOptionError, match="") as info:
        resolve_request_options(SPECS, given, "m")
    assert info.value.option == option
    assert says in str(info.value)


def test_a_model_without_options_refuses_any_by_name():
    assert resolve_request_options((), {}, "tiny-orpheus") == {}
    with pytest.raises(RequestOptionError, match="tiny-orpheus takes no model_options"):
        resolve_request_options((), {"exaggeration": 0.5}, "tiny-orpheus")


def test_a_default_outside_its_range_is_a_declaration_error():
    with pytest.raises(ValueError, match="outside"):
        request_option(3.0, 0.0, 1.0, "x")


def test_chatterbox_declares_the_published_defaults():
    from models.chatterbox.config import SAMPLING

    specs = {s.name: s for s in option_specs(CHATTERBOX.request_options)}
    assert specs["exaggeration"].default == SAMPLING.exaggeration
    assert specs["cfg_weight"].default == SAMPLING.cfg_weight


def test_engine_config_does_not_import_the_model_table():
    """The engine's settings are the engine's: the family table (and every family's module)
    stays out of `import engine.config`."""
    code = (
        "import sys, engine.config; print(sorted(m for m in sys.modules if m.startswith('models')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "models.families" not in out.stdout and "chatterbox" not in out.stdout, out.stdout
