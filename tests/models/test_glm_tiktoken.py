"""GLM-4-Voice's published tokenizer layout (tiktoken `tokenizer.model` + `tokenizer_config.json`,
no tokenizer.json): our converted fast tokenizer encodes and decodes exactly as the reference
`tiktoken` Encoding on the same ranks and added tokens (what ChatGLM4Tokenizer runs), keeps
every added token at its published id, and the model loads from such a folder."""

from __future__ import annotations

import json
import logging
import random
import shutil

import pytest
import torch

from models.checkpoint_errors import CheckpointError
from models.glm_voice import configs
from models.glm_voice import tokens as T
from models.glm_voice.loading import load_glm_tokenizer, load_glm_voice
from models.glm_voice.presets import TINY_NUM_AUDIO, write_glm_checkpoint
from models.glm_voice.tiktoken_convert import (
    GLM4_SPLIT_PATTERN,
    read_tiktoken_ranks,
    tiktoken_to_tokenizer,
)
from models.glm_voice.tiny_tokenizer import UNREACHABLE_TOKEN, write_tiny_tiktoken

tiktoken = pytest.importorskip("tiktoken")

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "It's 12:45; they're waiting, we'll see. I'M LOUD AND IT'S FINE'S",
    "Numbers: 1000000, 3.14159, -42, 2024-11-29 and 0x1F.",
    "Punctuation!!! ...?? (brackets) [x] {y} <tag> a/b\\c \"quotes\" 'single' --- ***",
    "  leading spaces, double  spaces,   triple, tab\there, trailing   ",
    "line one\nline two\n\n\nafter blank lines\r\nwindows line\n   indented\n\t\ttabs\n",
    "Unicode: café naïve Ünïcödé — “curly” ‘quotes’ € £ ¥ ½ ™",
    "中文测试：你好，世界！日本語のテキスト。한국어 텍스트 Ελληνικά русский עברית العربية",
    "emoji 😀🎉👍🏽 and a family 👨‍👩‍👧 and flags 🇫🇷🇯🇵",
    "speech models turn sound into tokens, then tokens back into sound",
    "",
    " ",
    "\n",
    "a",
]


@pytest.fixture(scope="module")
def tiktoken_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("glm-tiktoken")
    write_tiny_tiktoken(folder, num_audio=TINY_NUM_AUDIO)
    return folder


@pytest.fixture(scope="module")
def added(tiktoken_dir):
    decoder = json.loads((tiktoken_dir / "tokenizer_config.json").read_text())
    return {e["content"]: int(i) for i, e in decoder["added_tokens_decoder"].items()}


@pytest.fixture(scope="module")
def reference(tiktoken_dir, added):
    """What ChatGLM4Tokenizer runs: tiktoken over the ranks and GLM-4's split pattern."""
    return tiktoken.Encoding(
        name="glm4-tiny",
        pat_str=GLM4_SPLIT_PATTERN,
        mergeable_ranks=read_tiktoken_ranks(tiktoken_dir / "tokenizer.model"),
        special_tokens=added,
    )


@pytest.fixture(scope="module")
def ours(tiktoken_dir):
    return tiktoken_to_tokenizer(
        tiktoken_dir / "tokenizer.model", tiktoken_dir / "tokenizer_config.json"
    )


def test_the_tiny_vocabulary_has_real_merges(reference):
    # A BPE without multi-byte tokens would make the comparison below trivial.
    assert reference.n_vocab > 256 + 200
    assert len(reference.encode("the quick brown fox")) < len("the quick brown fox") / 2


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_equal_tiktoken(ours, reference, text):
    want = reference.encode(text)
    got = ours.encode(text, add_special_tokens=False).ids
    assert got == want
    assert ours.decode(got, skip_special_tokens=False) == reference.decode(want) == text


def test_a_token_no_merge_reaches_is_taken_whole_as_tiktoken_does(ours, reference):
    text = f"Hello{UNREACHABLE_TOKEN}!"
    want = reference.encode(text)
    assert reference.encode_single_token(UNREACHABLE_TOKEN.encode()) in want
    assert ours.encode(text, add_special_tokens=False).ids == want


def test_random_text_encodes_as_tiktoken(ours, reference):
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,;:!?'\"-()\n\t  éü中😀's're"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))
        assert ours.encode(text, add_special_tokens=False).ids == reference.encode(text), text


def test_decode_of_arbitrary_ids_equals_tiktoken_including_broken_utf8(ours, reference, added):
    # Single tokens can be partial UTF-8 sequences; both replace invalid bytes with U+FFFD.
    rng = random.Random(1)
    n = min(added.values())  # the BPE ranks
    for _ in range(200):
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 12))]
        assert ours.decode(ids) == reference.decode(ids), ids


def test_special_and_audio_tokens_keep_their_published_ids(ours, reference, added):
    for name, i in added.items():
        assert ours.token_to_id(name) == i
        assert ours.id_to_token(i) == name
    # ids have a gap between the specials and <|audio_0|>, as a published vocabulary may
    assert added[T.audio_token(0)] > added[T.END_OF_AUDIO] + 1
    text = f"[gMASK]<sop><|system|>\nhi<|user|>\n{T.BEGIN_OF_AUDIO}<|audio_3|><|audio_63|>{T.END_OF_AUDIO}<|assistant|>ok"
    want = reference.encode(text, allowed_special="all")
    got = ours.encode(text, add_special_tokens=False).ids
    assert got == want
    assert added[T.audio_token(63)] in got and added["[gMASK]"] == got[0]
    assert ours.decode(got, skip_special_tokens=False) == text
    assert ours.decode(got, skip_special_tokens=True) == "\nhi\nok"


def test_glm_ids_resolve_from_the_converted_tokenizer(ours, added):
    ids = T.GlmVoiceIds.from_tokenizer(ours)
    assert ids.audio_base == added[T.audio_token(0)]
    assert ids.num_audio == TINY_NUM_AUDIO
    assert ids.user == added[T.USER] and ids.prefix == (added["[gMASK]"], added["<sop>"])


def test_loader_converts_and_caches_tokenizer_json(tiktoken_dir, reference, tmp_path, caplog):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiktoken_dir, folder)
    with caplog.at_level(logging.INFO, logger="models.glm_voice.loading"):
        tok = load_glm_tokenizer(folder)
    assert (folder / "tokenizer.json").exists()
    assert "cached at" in caplog.text
    assert not list(folder.glob(".tokenizer.json.*"))
    cached = load_glm_tokenizer(folder)  # now read from tokenizer.json
    for text in TEXTS:
        want = reference.encode(text)
        assert tok.encode(text, add_special_tokens=False).ids == want
        assert cached.encode(text, add_special_tokens=False).ids == want


def test_loader_keeps_the_tokenizer_in_memory_when_the_cache_cannot_be_written(
    tiktoken_dir, reference, tmp_path, caplog, monkeypatch
):
    import os

    folder = tmp_path / "ckpt"
    shutil.copytree(tiktoken_dir, folder)
    # A directory where the cache's temporary file goes: the write fails (even for root,
    # whom a read-only permission would not stop), as on a read-only checkpoint folder.
    (folder / f".tokenizer.json.{os.getpid()}.tmp").mkdir()
    with caplog.at_level(logging.INFO, logger="models.glm_voice.loading"):
        tok = load_glm_tokenizer(folder)
    assert not (folder / "tokenizer.json").exists()
    assert "kept in memory" in caplog.text
    assert tok.encode(TEXTS[0], add_special_tokens=False).ids == reference.encode(TEXTS[0])


def test_missing_or_broken_tokenizer_files_are_named(tiktoken_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="neither tokenizer.json nor tokenizer.model"):
        load_glm_tokenizer(empty)
    no_config = tmp_path / "no-config"
    no_config.mkdir()
    shutil.copy(tiktoken_dir / "tokenizer.model", no_config)
    with pytest.raises(CheckpointError, match="tokenizer_config.json is missing"):
        load_glm_tokenizer(no_config)
    broken = tmp_path / "broken"
    shutil.copytree(tiktoken_dir, broken)
    (broken / "tokenizer.model").write_text("not-base64!! 0\n")
    with pytest.raises(CheckpointError, match="tiktoken line"):
        load_glm_tokenizer(broken)


def test_glm_voice_loads_from_the_published_tiktoken_layout(tmp_path):
    """The whole model through load_glm_voice from a folder with tokenizer.model only; its
    prompt ids are what the reference tokenizer gives, and it generates through the engine's
    path (a prefill's logits have the vocabulary's width)."""
    folder = tmp_path / "glm-4-voice-9b"
    write_glm_checkpoint(folder, configs.TINY_GLM_VOICE, seed=3, tokenizer_layout="tiktoken")
    assert not (folder / "tokenizer.json").exists()
    model = load_glm_voice(str(folder), torch.device("cpu"), torch.float32)
    ref = tiktoken.Encoding(
        name="glm4-tiny",
        pat_str=GLM4_SPLIT_PATTERN,
        mergeable_ranks=read_tiktoken_ranks(folder / "tokenizer.model"),
        special_tokens={
            e["content"]: int(i)
            for i, e in json.loads((folder / "tokenizer_config.json").read_text())[
                "added_tokens_decoder"
            ].items()
        },
    )
    assert model.ids.num_audio == TINY_NUM_AUDIO
    assert model.ids.audio_base == ref.encode_single_token(T.audio_token(0))
    from models.glm_voice.prompt import UserTurn

    prompt = model.preprocess_turns([UserTurn(text="Hello there, how are you?")]).token_ids
    system = T.TEXT_SYSTEM_PROMPT
    want = ref.encode(
        f"[gMASK]<sop><|system|>\n{system}<|user|>\nHello there, how are you?"
        f"<|assistant|>{T.ASSISTANT_MODE}",
        allowed_special="all",
    )
    assert list(prompt) == want
    assert model.reply_text([*ref.encode(" fine, thanks"), model.ids.audio_base + 5]) == (
        " fine, thanks"
    )
