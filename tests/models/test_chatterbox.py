"""Chatterbox in Voxgate's own modules: the tiny preset in the published layout, its loader,
the text front end, and whole-utterance synthesis (T3 with CFG on the paged KV → S3Gen)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.chatterbox.checkpoint import load_chatterbox, read_conds
from models.chatterbox.config import CHECKPOINT_FILES, CONDS_FILE, T3_FILE, TINY_T3
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.synth import synthesize
from models.chatterbox.text import normalise_punctuation
from models.checkpoint_errors import CheckpointError


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def model(folder):
    return load_chatterbox(folder)


def test_preset_is_written_once_in_the_published_layout(folder, tmp_path_factory):
    assert {p.name for p in folder.iterdir()} >= set(CHECKPOINT_FILES)
    stamp = (folder / T3_FILE).stat().st_mtime_ns
    assert ensure_tiny_chatterbox(folder.parent.parent) == folder
    assert (folder / T3_FILE).stat().st_mtime_ns == stamp


def test_loader_reads_the_sizes_and_default_voice(model):
    assert model.t3.sizes == TINY_T3
    voice = model.default_voice
    assert voice.t3.speaker.shape == (256,) and voice.t3.prompt_tokens.shape == (150,)
    assert voice.t3.exaggeration == 0.5
    assert voice.s3gen.prompt_mel.shape == (2 * voice.s3gen.prompt_tokens.shape[0], 80)


def test_missing_files_are_named(folder, tmp_path):
    with pytest.raises(CheckpointError, match=T3_FILE):
        load_chatterbox(tmp_path)
    with pytest.raises(CheckpointError, match=CONDS_FILE):
        read_conds(tmp_path / CONDS_FILE)


def test_text_front_end():
    assert normalise_punctuation("hello   world: yes…") == "Hello world, yes,"
    assert normalise_punctuation("ok") == "Ok."
    assert normalise_punctuation("") == "You need to add some text for me to talk."


def test_text_ids_are_framed_by_start_and_stop(model):
    ids = model.tokenizer.text_ids("hi there")
    assert ids[0] == 255 and ids[-1] == 0
    assert ids.count(model.tokenizer.tokenizer.token_to_id("[SPACE]")) == 1


def test_greedy_synthesis_is_deterministic_and_sized_by_its_tokens(model):
    rules = T3Sampling(greedy=True)
    tokens, audio = synthesize(model, "Hello there.", rules=rules, max_new_tokens=30)
    again, audio2 = synthesize(model, "Hello there.", rules=rules, max_new_tokens=30)
    codes = [t for t in tokens if t < 6561]
    assert tokens == again and np.array_equal(audio, audio2)
    assert 0 < len(tokens) <= 30
    assert audio.shape == (len(codes) * 2 * 480,) and audio.dtype == np.float32
    assert np.all(np.isfinite(audio)) and np.abs(audio).max() <= 0.99


def test_sampling_is_seeded_and_the_options_matter(model):
    a, _ = synthesize(model, "Sampled speech.", max_new_tokens=20, seed=1)
    b, _ = synthesize(model, "Sampled speech.", max_new_tokens=20, seed=1)
    c, _ = synthesize(model, "Sampled speech.", max_new_tokens=20, seed=2)
    assert a == b and a != c
    greedy = T3Sampling(greedy=True)
    calm, _ = synthesize(model, "Hello.", rules=greedy, exaggeration=0.0, max_new_tokens=20)
    wild, _ = synthesize(model, "Hello.", rules=greedy, exaggeration=2.0, max_new_tokens=20)
    assert calm != wild


def test_bad_options_are_refused(model):
    with pytest.raises(ValueError, match="exaggeration"):
        synthesize(model, "Hi.", exaggeration=3.0)
    with pytest.raises(ValueError, match="min_p"):
        T3Sampling(min_p=1.5)
    with pytest.raises(ValueError, match="cfg_weight"):
        T3Sampling(cfg_weight=-1.0)


def test_t3_runs_in_bfloat16(folder):
    model = load_chatterbox(folder, dtype=torch.bfloat16)
    tokens, audio = synthesize(model, "Hi.", rules=T3Sampling(greedy=True), max_new_tokens=10)
    assert len(tokens) > 0 and np.all(np.isfinite(audio))
