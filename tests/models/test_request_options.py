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
    same_options,
    text_option,
)


@dataclass(frozen=True)
class Knobs:
    warmth: float = request_option(0.5, 0.0, 1.0, "how warm")
    pace: float = request_option(1.0, 0.5, 2.0, "speaking pace")


SPECS = option_specs(Knobs)

LANGUAGES = ("auto", "english", "german", "french", "spanish")


@dataclass(frozen=True)
class Words:
    pace: float = request_option(1.0, 0.5, 2.0, "speaking pace")
    language: str = text_option("auto", choices=LANGUAGES, help="the language to speak")
    instruction: str = text_option("", max_chars=12, help="how to speak")


WORDS = option_specs(Words)


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
    with pytest.raises(RequestOptionError) as info:
        resolve_request_options(SPECS, given, "m")
    assert info.value.option == option
    assert says in str(info.value)


def test_an_unknown_option_suggests_the_closest_name():
    from models.zonos.family import FAMILY as ZONOS

    specs = option_specs(ZONOS.request_options)
    with pytest.raises(RequestOptionError) as info:
        resolve_request_options(specs, {"happiness": 0.5}, "zonos")
    assert info.value.option == "happiness"
    assert "unknown model option 'happiness' for zonos (did you mean 'emotion_happiness'?)" in str(
        info.value
    )
    assert "it takes: emotion_happiness, emotion_sadness" in str(info.value)
    with pytest.raises(RequestOptionError) as far:  # nothing near: no guess
        resolve_request_options(specs, {"volume": 1}, "zonos")
    assert "did you mean" not in str(far.value)


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


def test_text_options_take_a_choice_or_bounded_text_and_fill_defaults():
    assert resolve_request_options(WORDS, {}, "m") == {
        "pace": 1.0,
        "language": "auto",
        "instruction": "",
    }
    got = resolve_request_options(WORDS, {"language": "German", "instruction": "Softly.\n"}, "m")
    # A choice matches whatever its case, and reaches the model spelt as the model lists it.
    assert got == {"pace": 1.0, "language": "german", "instruction": "Softly.\n"}


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (
            {"language": "klingon"},
            "model_options.language must be one of auto, english, german, french, spanish "
            "(the language to speak), got 'klingon'",
        ),
        ({"language": "englsh"}, "did you mean 'english'?"),
        ({"language": 3}, "model_options.language must be text (one of auto, english"),
        ({"language": None}, "must be text"),
        ({"instruction": ["x"]}, "must be text (at most 12 characters), got list"),
        ({"instruction": "x" * 13}, "instruction is limited to 12 characters (how to speak)"),
        ({"instruction": "a\x00b"}, "must not hold control characters (got U+0000 at 1)"),
        ({"instruction": "\x1b[2J"}, "control characters (got U+001B at 0)"),
    ],
)
def test_bad_text_options_name_the_option_and_what_is_accepted(given, says):
    with pytest.raises(RequestOptionError) as info:
        resolve_request_options(WORDS, given, "m")
    assert info.value.option == next(iter(given))
    assert says in str(info.value)


def test_a_long_choice_list_is_named_by_examples_and_where_it_is_listed():
    many = tuple(f"l{i:02}" for i in range(40))

    @dataclass(frozen=True)
    class Many:
        language: str = text_option("l07", choices=many, help="a language")

    with pytest.raises(RequestOptionError) as info:
        resolve_request_options(option_specs(Many), {"language": "zz"}, "m")
    said = str(info.value)
    assert "one of the 40 that session.started.model_options lists, e.g. l07, l00, l01" in said
    assert "l39" not in said


def test_announced_text_options_say_their_kind_and_numbers_keep_their_shape():
    pace, language, instruction = (s.announce() for s in WORDS)
    assert pace == {
        "name": "pace",
        "default": 1.0,
        "minimum": 0.5,
        "maximum": 2.0,
        "help": "speaking pace",
    }
    assert language == {
        "name": "language",
        "kind": "text",
        "default": "auto",
        "choices": list(LANGUAGES),
        "help": "the language to speak",
    }
    assert instruction == {
        "name": "instruction",
        "kind": "text",
        "default": "",
        "max_chars": 12,
        "help": "how to speak",
    }


def test_a_checkpoint_may_narrow_its_familys_choices():
    pace, language, instruction = WORDS
    mine = (pace, language.narrowed(("auto", "english")), instruction)
    assert same_options(mine, WORDS)
    with pytest.raises(RequestOptionError, match="one of auto, english"):
        resolve_request_options(mine, {"language": "german"}, "m")
    with pytest.raises(ValueError, match="default 'auto'"):
        language.narrowed(("english",))
    assert not same_options((pace, language), WORDS)
    assert not same_options((instruction, language, pace), WORDS)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: text_option("x", help="h"), "either choices or max_chars"),
        (lambda: text_option("x", choices=("a",), max_chars=3, help="h"), "either"),
        (lambda: text_option("x", choices=("a", "b"), help="h"), "not one of the choices"),
        (lambda: text_option("a", choices=("a", "A"), help="h"), "other than by case"),
        (lambda: text_option("a", choices=(), help="h"), "non-empty"),
        (lambda: text_option("long", max_chars=3, help="h"), "hold the default"),
    ],
)
def test_a_bad_text_option_is_a_declaration_error(make, says):
    with pytest.raises(ValueError, match=says):
        make()
