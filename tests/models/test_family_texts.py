"""Texts that name model families are made from the family table (models/families.py), so a
family added or changed there shows up in them: --voices-dir's help and the gateway's
cloning_unsupported error. --cpu-threads' help (engine/config.py, which imports no family)
names none."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import EngineConfig
from gateway.clip_audio import ClipError, check_request
from gateway.config import GatewaySettings
from models.base import ModelFacts
from models.families import FAMILIES


def _help(settings: type, name: str) -> str:
    [spec] = [f for f in dataclasses.fields(settings) if f.name == name]
    return spec.metadata["help"]


CLONING = [f.cloning_name for f in FAMILIES if f.takes_voices]


def test_the_families_that_clone_include_chatterbox_and_exclude_those_with_one_voice():
    assert {"CSM", "CosyVoice 2", "Chatterbox", "Zonos", "Qwen3-TTS Base"} == set(CLONING)


def test_voices_dir_help_names_every_family_that_takes_voices():
    text = _help(GatewaySettings, "voices_dir")
    for name in CLONING:
        assert name in text, name
    for family in FAMILIES:
        if not family.takes_voices:
            assert family.name not in text, family.name


def test_cloning_unsupported_names_every_family_that_clones():
    facts = ModelFacts(
        name="tts",
        sample_rate=24000,
        token_rate_hz=75.0,
        stop_token_ids=(0,),
        first_chunk_tokens=1,
        chunk_tokens=1,
    )
    with pytest.raises(ClipError) as err:
        check_request(facts, "hello")
    assert err.value.code == "cloning_unsupported"
    for name in CLONING:
        assert name in err.value.message, name


def test_cpu_threads_help_names_no_family():
    """The engine's settings stay out of the family table (engine/config.py imports none of
    it), so --cpu-threads' help says which families take half the cores without naming any."""
    text = _help(EngineConfig, "cpu_threads")
    assert {f.name for f in FAMILIES if f.serving.cpu_half_threads} == {"voxgate-tiny", "Zonos"}
    for family in FAMILIES:
        assert family.name not in text, family.name
