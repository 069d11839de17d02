"""voxgate-tiny's G2P: the shipped lexicon gives the teacher's phones exactly, the LTS model comes
close on words it never saw, and nothing outside PHONE_INVENTORY (or pau) ever comes out."""

from __future__ import annotations

import gzip
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from models.voxgate_tiny import g2p
from models.voxgate_tiny.lts import LetterToSound
from training.judge import edit_distance
from training.lexicon import T2P, as_word
from training.lts import evaluate, is_heldout, lexicon_pairs, train
from training.lts_align import viterbi
from training.phones import PHONE_ID
from training.teacher import unpack_debs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lexicon() -> list[tuple[str, list[str]]]:
    return lexicon_pairs(g2p.LEXICON_PATH)


@pytest.fixture(scope="module")
def t2p():
    """Flite's t2p from the teacher debs (or the system's), or skip."""
    if any((REPO / ".teacher").glob("flite_*.deb")):
        with tempfile.TemporaryDirectory() as tmp:
            yield T2P(unpack_debs(REPO / ".teacher", Path(tmp)))
        return
    if shutil.which("t2p"):
        yield T2P(None)
        return
    pytest.skip("no Flite t2p: `make teacher-debs` (or apt-get install flite)")


def test_lexicon_words_come_back_exactly(lexicon):
    for word, phones in random.Random(0).sample(lexicon, 2000):
        assert g2p.word_phones(word) == tuple(phones), word
    assert g2p.word_phones("hello") == ("hh", "ax", "l", "ow")
    assert g2p.in_lexicon("seventeenth") and g2p.in_lexicon("o'clock")


def test_lexicon_agrees_with_flite_alone_and_batched(lexicon, t2p):
    sample = [w for w, _ in random.Random(1).sample(lexicon, 40)] + ["the", "a", "bbc"]
    batched = t2p.batch(sample)
    for word, phones in zip(sample, batched, strict=True):
        assert phones == t2p.word(word) == list(g2p.word_phones(word)), word


def test_lts_is_close_on_held_out_words(lexicon):
    """The shipped LTS never trained on these words (training/lts.py holds them out)."""
    heldout = [wp for wp in lexicon if is_heldout(wp[0])]
    sample = random.Random(2).sample(heldout, 300)
    accuracy, phone_errors = evaluate(g2p._load()[1], sample)
    assert phone_errors < 0.15 and accuracy > 0.4, (accuracy, phone_errors)
    lts, reference = g2p._load()[1], dict(heldout)
    for word in ("atmosphere", "badminton", "artichokes", "adorable", "appeasement", "acrylic"):
        assert is_heldout(word)
        assert edit_distance(lts.phones(word), reference[word]) <= 1, (word, lts.phones(word))


def test_never_unknown_phones_nor_pau():
    odd = ["voxgate", "zelensky", "'", "''s", "xxxxxxxxxxxx", "qwrtp", "a", "z", "aeiouy'", "tsch"]
    odd += ["".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz'", k=i % 15 + 1))
            for i in range(200)]  # fmt: skip
    for word in odd:
        phones = g2p.word_phones(word)
        assert all(p in PHONE_ID and p != "pau" for p in phones), (word, phones)
    assert g2p.word_phones("voxgate")  # an out-of-lexicon word still gets phones
    assert not g2p.in_lexicon("voxgate")
    with pytest.raises(ValueError, match="normalize"):
        g2p.word_phones("Hello world")


def test_missing_lexicon_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setattr(g2p, "LEXICON_PATH", tmp_path / "lexicon.tsv.gz")
    monkeypatch.setattr(g2p, "_lexicon", None)
    g2p.word_phones.cache_clear()
    try:
        with pytest.raises(g2p.G2PDataMissing, match="training.lexicon"):
            g2p.word_phones("hello")
    finally:
        g2p.word_phones.cache_clear()


def test_alignment_and_a_tiny_lts_round_trip(tmp_path, lexicon):
    table = {"b": {"b": -0.1, "": -9.0}, "o": {"aa": -0.1, "": -9.0}, "x": {"k s": -0.5, "": -9.0}}
    assert viterbi("box", ["b", "aa", "k", "s"], table) == ["b", "aa", "k s"]
    assert viterbi("ab", ["a", "b", "c", "d", "e"], table) is None  # > 2 phones a letter
    lts = train(lexicon[:300], context=2, hidden=16, epochs=1, seed=0, log=lambda *_: None)
    lts.save(tmp_path / "lts.npz")
    loaded = LetterToSound.load(tmp_path / "lts.npz")
    assert loaded.chunks == lts.chunks and loaded.context == 2
    for name in ("w1", "b1", "w2", "b2", "w3", "b3"):  # float16 on disk
        np.testing.assert_array_equal(
            getattr(loaded, name), getattr(lts, name).astype(np.float16).astype(np.float32)
        )
    for word, _ in lexicon[300:340]:
        assert all(p in PHONE_ID for p in loaded.phones(word))
    assert as_word("Zelensky's") == "zelensky's" and as_word("co-op") is None


def test_lexicon_file_is_sorted_unique_and_small():
    assert g2p.LEXICON_PATH.stat().st_size < 2_000_000 and g2p.LTS_PATH.stat().st_size < 2_000_000
    with gzip.open(g2p.LEXICON_PATH, "rt") as f:
        words = [line.split("\t")[0] for line in f]
    assert words == sorted(set(words)) and len(words) > 90_000
