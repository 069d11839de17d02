"""voxgate-tiny's text normaliser: what the teacher read is what the model is given."""

from __future__ import annotations

import pytest

from models.voxgate_tiny.text import CharTokenizer, normalize, number_words, year_words
from training.sentences import heldout_sentences, is_heldout, training_sentences


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "Dr. Smith paid $12.50 for 3 apples.",
            "doctor smith paid twelve dollars and fifty cents for three apples.",
        ),
        ("The bus leaves at 7:05!", "the bus leaves at seven oh five!"),
        ("On the 21st of May, 1999.", "on the twenty first of may, nineteen ninety nine."),
        ("It's 45% off & free", "it's forty five percent off and free"),
        (
            "1,250 people; 3.14 miles",
            "one thousand two hundred fifty people, three point one four miles",
        ),
        ("“Quoted” — text…", "quoted text."),
    ],
)
def test_normalize_spells_out_what_characters_cannot_say(text, said):
    assert normalize(text) == said


def test_numbers_and_years():
    assert number_words(0) == "zero"
    assert number_words(105) == "one hundred five"
    assert number_words(2_000_017) == "two million seventeen"
    assert year_words(2005) == "two thousand five" and year_words(1906) == "nineteen oh six"


def test_normalize_is_idempotent_and_in_vocabulary():
    tokenizer = CharTokenizer()
    for text in training_sentences(300):
        said = normalize(text)
        assert normalize(said) == said
        ids = tokenizer.encode(said)
        assert len(ids) == len(said) + 2 and ids[0] == tokenizer.bos and ids[-1] == tokenizer.audio


def test_heldout_sentences_never_train():
    held = heldout_sentences(20)
    assert all(is_heldout(t) for t in held)
    assert not set(held) & set(training_sentences(3000))
