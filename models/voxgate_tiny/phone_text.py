"""voxgate-tiny's phone input: what a model trained with `--phones` reads instead of characters.

The text is normalised exactly as for the character model (text.py `normalize`), split into
words and punctuation, and each word becomes its phones from a lexicon G2P (`word_phones`:
PHONE_INVENTORY names without stress). Between words sits a word-boundary symbol " ", and
`, . ? !` stay symbols of their own, so the model still sees phrasing:

    "how much, sir?" → <bos> hh aw ␣ m ah ch , ␣ s er ? <audio>      (␣ is the symbol " ")

Ids: the specials (`<pad>`, `<bos>`, `<audio>`), the boundary and punctuation symbols, then
PHONE_INVENTORY's phones without `pau` (a pause is where the voice stops at a boundary or a
punctuation mark, not an input). Saved in tokenizer.json as type "voxgate-phones" with the
normaliser's name; text.py `load_tokenizer` picks the class by that type.

The model reads the phones the G2P gives (the lexicon's, before Flite's post-lexical rules such
as reduced vowels); training points the reading pointer into this very sequence
(training/phone_reading.py) and the model learns those changes from the audio.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from models.voxgate_tiny.phones import PAUSE, PHONE_INVENTORY
from models.voxgate_tiny.text import SPECIALS, SymbolTokenizer

TOKENIZER_TYPE = "voxgate-phones"
BOUNDARY = " "
MARKS = (",", ".", "?", "!")
PHONE_SYMBOLS = SPECIALS + (BOUNDARY, *MARKS) + tuple(p for p in PHONE_INVENTORY if p != PAUSE)

WordPhones = Callable[[str], Sequence[str]]
_ITEMS = re.compile(r"[a-z']+|[,.?!]")


def text_items(normalized: str) -> list[str]:
    """Normalised text → its words (apostrophes inside kept, at the edges dropped) and marks."""
    items = []
    for item in _ITEMS.findall(normalized):
        item = item.strip("'")
        if item:
            items.append(item)
    return items


@dataclass(frozen=True)
class PhoneSequence:
    """The input symbols of one text, and for each word of it the span of its phones."""

    symbols: list[str]
    words: list[str]
    word_spans: list[tuple[int, int]]  # [start, end) into symbols, one per word


def phone_sequence(normalized: str, word_phones: WordPhones) -> PhoneSequence:
    """Normalised text → symbols (module docstring): word phones, " " between words, marks.
    `word_phones` raises KeyError (or returns nothing) for a word it cannot say."""
    symbols: list[str] = []
    words, spans = [], []
    for item in text_items(normalized):
        if item in MARKS:
            symbols.append(item)
            continue
        phones = tuple(word_phones(item))
        if not phones:
            raise KeyError(item)
        if symbols:
            symbols.append(BOUNDARY)
        words.append(item)
        spans.append((len(symbols), len(symbols) + len(phones)))
        symbols.extend(phones)
    return PhoneSequence(symbols, words, spans)


def _serving_g2p(word: str) -> Sequence[str]:
    # Imported when first used: the G2P ships separately (models/voxgate_tiny/g2p.py), and a
    # character checkpoint never needs it.
    try:
        from models.voxgate_tiny.g2p import word_phones
    except ImportError as exc:
        raise ImportError(
            f"this voxgate-tiny checkpoint reads phones and needs the G2P "
            f"models/voxgate_tiny/g2p.py, which this Voxgate lacks ({exc}): update Voxgate"
        ) from None

    return word_phones(word)


@dataclass(frozen=True)
class PhoneTokenizer(SymbolTokenizer):
    """Normalised text → `<bos>` + phone-sequence ids + `<audio>` (CharTokenizer's interface)."""

    kind: ClassVar[str] = TOKENIZER_TYPE
    symbols: tuple[str, ...] = PHONE_SYMBOLS
    word_phones: WordPhones = field(default=_serving_g2p, compare=False, repr=False)

    def ids(self, symbols: Sequence[str]) -> list[int]:
        """Symbols → `<bos>` + ids + `<audio>`; a symbol outside the vocabulary is an error
        (a G2P giving phones this checkpoint does not know)."""
        unknown = sorted({s for s in symbols if s not in self._ids})
        if unknown:
            raise ValueError(f"symbols {unknown} are not in this phone vocabulary")
        return [self.bos, *(self._ids[s] for s in symbols), self.audio]

    def encode(self, normalized: str) -> list[int]:
        return self.ids(phone_sequence(normalized, self.word_phones).symbols)
