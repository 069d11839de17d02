"""What a load asks besides the model (--codec, --voices-dir) is declared on each family and
checked once, before the family loads anything (models/load_checks.py): a family that declares
nothing refuses both, with a message that says what to drop and who takes it."""

from __future__ import annotations

import dataclasses

import pytest

from models.checkpoint_errors import CheckpointError
from models.families import FAMILIES, cloning_families, codec_families
from models.family_spec import ModelFamily
from models.load_checks import check_load


def _never_loads(request):
    raise AssertionError("the load was not refused first")


BARE = ModelFamily(
    name="Bare", presets={"bare": "a family that declares nothing"}, load=_never_loads
)


def test_a_family_that_declares_nothing_refuses_a_codec_and_voices():
    with pytest.raises(CheckpointError) as err:
        check_load(BARE, "bare", "hubertsiuzdak/snac_24khz", None)
    assert str(err.value) == (
        f"Bare checkpoints carry their own codec; drop --codec (it is for {codec_families()} "
        "models)"
    )
    with pytest.raises(CheckpointError) as err:
        check_load(BARE, "bare", None, "/voices")
    assert str(err.value) == (
        "Bare models make no voices from clips; drop --voices-dir "
        f"(it is for {cloning_families()} models)"
    )
    check_load(BARE, "bare", None, None)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_is_checked_by_its_declaration(family, tmp_path):
    if family.takes_codec:
        check_load(family, "m", "some/codec", None)
    else:
        with pytest.raises(CheckpointError, match="drop --codec"):
            check_load(family, "m", "some/codec", None)
    if family.takes_voices:
        check_load(family, "m", None, str(tmp_path))
    else:
        with pytest.raises(CheckpointError, match="drop --voices-dir"):
            check_load(family, "m", None, str(tmp_path))


def test_a_voices_folder_that_is_not_there_is_refused_before_any_weights_load(tmp_path):
    cloning = next(f for f in FAMILIES if f.takes_voices)
    missing = tmp_path / "my-voices"
    with pytest.raises(CheckpointError) as err:
        check_load(cloning, "m", None, str(missing))
    assert str(err.value) == (
        f"--voices-dir {missing}: no such folder; give a folder of NAME.wav clips, each with "
        "its transcript in NAME.txt"
    )


def test_the_declarations_name_the_families_that_take_each():
    assert codec_families() == "Orpheus"
    assert cloning_families() == "CosyVoice 2, Chatterbox, CSM, Zonos and Qwen3-TTS Base"


def test_load_model_refuses_before_loading():
    from models.registry import load_model

    with pytest.raises(CheckpointError, match="voxgate-tiny checkpoints carry their own codec"):
        load_model("voxgate-tiny", codec="hubertsiuzdak/snac_24khz")
    with pytest.raises(CheckpointError, match="Orpheus models make no voices from clips"):
        load_model("tiny-orpheus", voices_dir="/nowhere")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_random_weights_are_declared_for_every_preset_and_refused_on_seeded_ones(family):
    """Every preset either is seeded random weights already or has a real layout that
    --random-weights builds; the flag on a seeded preset is refused with one message."""
    assert family.random_layouts | family.seeded_presets == set(family.presets)
    assert not family.random_layouts & family.seeded_presets
    for preset in family.random_layouts:
        check_load(family, preset, None, None, random_weights=True)
    for preset in family.seeded_presets:
        layouts = ", ".join(n for n in family.presets if n in family.random_layouts)
        with pytest.raises(CheckpointError) as err:
            check_load(family, preset, None, None, random_weights=True)
        assert str(err.value) == (
            f"{preset} is random already: its seeded random weights already stand in for a "
            f"checkpoint; drop --random-weights (--random-weights works with {layouts})"
        )
        check_load(family, preset, None, None, random_weights=False)


def test_random_weights_on_a_preset_of_neither_kind_or_a_checkpoint_are_refused():
    with pytest.raises(CheckpointError, match="^bare takes no --random-weights"):
        check_load(BARE, "bare", None, None, random_weights=True)
    from models.registry import load_model

    with pytest.raises(CheckpointError, match="--random-weights works with presets only"):
        load_model("/some/folder", random_weights=True)
    # tiny-orpheus is seeded random weights: the flag is refused there as in every family.
    with pytest.raises(CheckpointError, match="tiny-orpheus is random already"):
        load_model("tiny-orpheus", random_weights=True)


def test_a_model_announces_its_familys_request_options_unless_it_narrows_them():
    """The family declares its request options once; the registry gives them to a model that
    announces none and checks a model that narrows them (Qwen3-TTS' languages)."""
    from types import SimpleNamespace

    from models.chatterbox.family import FAMILY as CHATTERBOX
    from models.qwen3_tts.family import FAMILY as QWEN3_TTS
    from models.qwen3_tts.family import checkpoint_options
    from models.registry import load_model, with_request_options
    from models.request_options import option_specs

    facts = load_model("voxgate-tiny").facts
    assert facts.request_options == ()
    model = with_request_options(SimpleNamespace(facts=facts), CHATTERBOX)
    assert model.facts.request_options == option_specs(CHATTERBOX.request_options)
    narrowed = checkpoint_options(["auto", "english"], None, False)
    model = with_request_options(SimpleNamespace(facts=facts), QWEN3_TTS)
    model.facts = dataclasses.replace(model.facts, request_options=narrowed)
    assert with_request_options(model, QWEN3_TTS).facts.request_options == narrowed
    with pytest.raises(RuntimeError, match="Chatterbox: the model announces request options"):
        with_request_options(model, CHATTERBOX)
