"""What a load asks besides the model (--codec, --voices-dir) is declared on each family and
checked once, before the family loads anything (models/load_checks.py): a family that declares
nothing refuses both, with a message that says what to drop and who takes it."""

from __future__ import annotations

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
        check_load(BARE, "hubertsiuzdak/snac_24khz", None)
    assert str(err.value) == (
        f"Bare checkpoints carry their own codec; drop --codec (it is for {codec_families()} "
        "models)"
    )
    with pytest.raises(CheckpointError) as err:
        check_load(BARE, None, "/voices")
    assert str(err.value) == (
        "Bare models make no voices from clips; drop --voices-dir "
        f"(it is for {cloning_families()} models)"
    )
    check_load(BARE, None, None)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_is_checked_by_its_declaration(family):
    if family.takes_codec:
        check_load(family, "some/codec", None)
    else:
        with pytest.raises(CheckpointError, match="drop --codec"):
            check_load(family, "some/codec", None)
    if family.takes_voices:
        check_load(family, None, "/voices")
    else:
        with pytest.raises(CheckpointError, match="drop --voices-dir"):
            check_load(family, None, "/voices")


def test_the_declarations_name_the_families_that_take_each():
    assert codec_families() == "Orpheus"
    assert cloning_families() == "CosyVoice 2, Chatterbox, CSM, Zonos and Qwen3-TTS Base"


def test_load_model_refuses_before_loading():
    from models.registry import load_model

    with pytest.raises(CheckpointError, match="voxgate-tiny checkpoints carry their own codec"):
        load_model("voxgate-tiny", codec="hubertsiuzdak/snac_24khz")
    with pytest.raises(CheckpointError, match="Orpheus models make no voices from clips"):
        load_model("tiny-orpheus", voices_dir="/nowhere")
