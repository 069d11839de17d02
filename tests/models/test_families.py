"""The model-family table (models/families.py): presets and checkpoint folders are recognised
without loading weights, an unknown model is a clear error, and options belong to one family."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from models.checkpoint_errors import CheckpointError
from models.families import (
    FAMILIES,
    all_presets,
    check_load_options,
    family_of,
    known_family,
    option_fields,
)
from models.registry import PRESETS, load_model


def folder_with(tmp_path, name: str, config: dict | None = None, files=()):
    folder = tmp_path / name
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    for file in files:
        (folder / file).write_text("")
    return folder


def test_every_preset_belongs_to_exactly_one_family():
    names = [name for family in FAMILIES for name in family.presets]
    assert len(names) == len(set(names)) == len(PRESETS) == 25
    expected = {
        "voxgate-tiny": "voxgate-tiny",
        "tiny-orpheus": "Orpheus",
        "orpheus-3b": "Orpheus",
        "tiny-csm": "CSM",
        "csm-1b": "CSM",
        "tiny-moshi": "Moshi",
        "moshi-7b": "Moshi",
        "tiny-cosyvoice2": "CosyVoice 2",
        "cosyvoice2-0.5b": "CosyVoice 2",
        "tiny-glm-voice": "GLM-4-Voice",
        "glm-4-voice-9b": "GLM-4-Voice",
        "tiny-step-audio2": "Step-Audio 2",
        "step-audio2-mini": "Step-Audio 2",
        "tiny-chatterbox": "Chatterbox",
        "chatterbox": "Chatterbox",
        "tiny-zonos": "Zonos",
        "zonos-v0.1": "Zonos",
        "tiny-zonos-hybrid": "Zonos",
        "zonos-v0.1-hybrid": "Zonos",
        "tiny-qwen3-tts": "Qwen3-TTS",
        "qwen3-tts-0.6b": "Qwen3-TTS",
        "qwen3-tts-1.7b": "Qwen3-TTS",
        "qwen3-tts-1.7b-voice-design": "Qwen3-TTS",
        "qwen3-tts-0.6b-base": "Qwen3-TTS",
        "qwen3-tts-1.7b-base": "Qwen3-TTS",
    }
    assert {name: family_of(name).name for name in all_presets()} == expected


@pytest.mark.parametrize(
    "config, files, family",
    [
        ({"model_type": "voxgate_tiny"}, (), "voxgate-tiny"),
        ({"model_type": "qwen3_tts"}, (), "Qwen3-TTS"),
        ({"model_type": "llama", "vocab_size": 156940}, (), "Orpheus"),
        ({"model_type": "csm"}, (), "CSM"),
        ({"model_type": "moshi"}, (), "Moshi"),
        ({"model_type": "step_audio_2"}, (), "Step-Audio 2"),
        (None, ("cosyvoice2.yaml",), "CosyVoice 2"),
        ({"backbone": {}, "prefix_conditioner": {}}, (), "Zonos"),
    ],
)
def test_checkpoint_folders_are_recognised_by_their_layout(tmp_path, config, files, family):
    folder = folder_with(tmp_path, "ckpt", config, files)
    assert family_of(str(folder)).name == family
    assert known_family(str(folder)).name == family


def test_an_unknown_model_is_a_clear_error(tmp_path):
    llama = folder_with(tmp_path, "plain-llama", {"model_type": "llama", "vocab_size": 32000})
    with pytest.raises(CheckpointError, match="not a model Voxgate knows: presets are") as err:
        family_of(str(llama))
    for hint in ("Orpheus: Llama config", "CSM: transformers' CsmConfig", "cosyvoice2.yaml"):
        assert hint in str(err.value)
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        family_of(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="lacks config.json"):
        family_of(str(folder_with(tmp_path, "empty")))
    # Before loading (serving defaults) nothing raises and nothing is downloaded.
    assert known_family(str(llama)) is None
    assert known_family(str(tmp_path / "nowhere")) is None
    assert known_family("someone/some-repo") is None


def test_random_weights_and_options_are_checked_before_any_load(tmp_path):
    folder = folder_with(tmp_path, "tiny", {"model_type": "voxgate_tiny"})
    with pytest.raises(CheckpointError, match="--random-weights works with presets only"):
        load_model(str(folder), random_weights=True)
    with pytest.raises(CheckpointError, match="--first-hop-tokens is for CosyVoice 2 models"):
        load_model("voxgate-tiny", options={"first_hop_tokens": 12})
    with pytest.raises(CheckpointError, match="no model family has an option 'exaggeration'"):
        load_model("voxgate-tiny", options={"exaggeration": 0.5})


def test_the_flow_hift_families_share_their_codec_options():
    """--codec-pacing / --compile-codec / --flow-float32: one option each, taken by every
    flow + HiFT family (--compile-codec by Orpheus too, for SNAC) and refused by the others,
    naming all who take it; --steady-batch-rows by the text-to-speech ones, and
    --first-chunk-lane by them and Qwen3-TTS (its 12 Hz decoder has a lane too)."""
    shared = {"codec_pacing", "compile_codec", "flow_float32"}
    for name in ("tiny-cosyvoice2", "tiny-chatterbox", "tiny-step-audio2"):
        assert shared <= family_of(name).option_names(), name
    owners = {spec.name: [f.name for f in families] for families, spec in option_fields()}
    assert set(owners["codec_pacing"]) == {"CosyVoice 2", "Chatterbox", "Step-Audio 2"}
    assert set(owners["flow_float32"]) == {"CosyVoice 2", "Chatterbox", "Step-Audio 2"}
    assert set(owners["compile_codec"]) == {"CosyVoice 2", "Chatterbox", "Step-Audio 2", "Orpheus"}
    orpheus = load_model("tiny-orpheus", options={"compile_codec": False})
    assert orpheus.facts.compile_codec is False
    # The first-chunk lane's options: the text-to-speech flow + HiFT families' and Qwen3-TTS.
    assert owners["steady_batch_rows"] == ["CosyVoice 2", "Chatterbox"]
    assert owners["first_chunk_lane"] == ["CosyVoice 2", "Chatterbox", "Qwen3-TTS"]
    assert "first_chunk_lane" not in family_of("tiny-step-audio2").option_names()
    with pytest.raises(CheckpointError, match="--codec-pacing is for CosyVoice 2, Chatterbox"):
        load_model("voxgate-tiny", options={"codec_pacing": False})
    with pytest.raises(ValueError, match="steady_batch_rows must be >= 0"):
        check_load_options({"steady_batch_rows": -1})


def test_serving_defaults_come_from_the_family():
    assert family_of("voxgate-tiny").serving.cpu_int8
    assert family_of("voxgate-tiny").serving.cpu_engine_process
    for name in ("tiny-orpheus", "tiny-csm", "tiny-moshi", "tiny-cosyvoice2", "tiny-glm-voice"):
        serving = family_of(name).serving
        assert not (serving.cpu_int8 or serving.cpu_engine_process or serving.cpu_half_threads)


def test_importing_the_table_loads_no_torch():
    """The command line reads the table for its help: importing it, and so every family.py,
    must not import torch (a family imports its loader inside `load`)."""
    code = "import sys, models.families; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


# Tiny presets the engine-level lists leave out, and why.
NOT_IN_ENGINE_RUN = {
    "tiny-moshi": "full duplex: no text request or turn; tests/models/test_moshi.py drives it",
    "tiny-zonos-hybrid": "tiny-zonos stands for Zonos; tests/models/test_zonos_hybrid.py",
}


def test_every_familys_tiny_preset_is_in_the_engine_run_lists():
    """tests/models/engine_run.py's lists are kept by hand (docs/models.md, "Adding a model
    family"): each seeded preset is in one of them or named above with the reason."""
    from tests.models.engine_run import SPOKEN_TURNS, TEXT_TO_SPEECH

    listed = set(TEXT_TO_SPEECH) | set(SPOKEN_TURNS) | set(NOT_IN_ENGINE_RUN)
    for family in FAMILIES:
        missing = set(family.seeded_presets) - listed
        assert not missing, f"{family.name}: {sorted(missing)} in no engine_run list"


def test_a_mistyped_preset_is_named_as_one_with_the_closest_presets():
    with pytest.raises(CheckpointError) as err:
        family_of("tiny-orpheuss")
    line = str(err.value)
    assert "'tiny-orpheuss' is neither a preset nor a checkpoint folder" in line
    assert "did you mean tiny-orpheus?" in line and "presets are tiny-cosyvoice2," in line
    assert "no checkpoint folder" not in line and "\n" not in line
    assert known_family("tiny-orpheuss") is None


def test_an_unreadable_folder_is_named_rather_than_a_file_inside_it(tmp_path, monkeypatch):
    import errno
    import os

    folder = folder_with(tmp_path, "locked", {"model_type": "llama"})
    readable = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: str(p) != str(folder) and readable(p, mode))
    with pytest.raises(PermissionError) as err:
        family_of(str(folder))
    assert err.value.errno == errno.EACCES and err.value.filename == str(folder)
    assert known_family(str(folder)) is None


@pytest.mark.parametrize(
    "name,detok_of",
    [
        ("tiny-cosyvoice2", lambda m: m.detok),
        ("tiny-chatterbox", lambda m: m.streamer.detok),
        ("tiny-step-audio2", lambda m: m.token2wav.detok),
    ],
)
def test_the_flow_hift_families_load_their_flow_in_the_models_dtype(name, detok_of):
    """The flow in the model's dtype (bf16 as served on CUDA; here on the CPU), HiFT in float32;
    --flow-float32 puts the flow in float32 whatever the model's dtype."""
    import torch

    for options, flow_dtype in (({}, torch.bfloat16), ({"flow_float32": True}, torch.float32)):
        detok = detok_of(load_model(name, dtype=torch.bfloat16, options=options))
        assert {p.dtype for p in detok.flow.parameters()} == {flow_dtype}, options
        assert {p.dtype for p in detok.hift.parameters()} == {torch.float32}, options
        assert detok.dtype == flow_dtype
