"""voxgate-tiny's text front end: a normaliser that spells out what a character model cannot read
(digits, symbols, abbreviations), and the character vocabulary of `tokenizer.json` (the phone
vocabulary of phone-reading checkpoints is phone_text.py's; `load_tokenizer` picks either).

The same normaliser runs before the teacher voice (training data) and before the model
(serving), so both see exactly the words the model was trained to say. It is versioned by name
in `tokenizer.json`: a checkpoint trained with another normaliser refuses to load.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from models.checkpoint_errors import CheckpointError

NORMALIZER = "voxgate-en-v1"
SPECIALS = ("<pad>", "<bos>", "<audio>")
SYMBOLS = SPECIALS + tuple(" ',.?!") + tuple("abcdefghijklmnopqrstuvwxyz")

_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINAL = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_ABBREVIATIONS = {
    "mr": "mister",
    "mrs": "missus",
    "ms": "miz",
    "dr": "doctor",
    "st": "street",
    "ave": "avenue",
    "etc": "et cetera",
    "vs": "versus",
    "no": "number",
    "jr": "junior",
}
_SYMBOL_WORDS = {
    "&": " and ",
    "%": " percent ",
    "+": " plus ",
    "@": " at ",
    "=": " equals ",
    "#": " number ",
}


def number_words(n: int) -> str:
    """0 ≤ n < 10¹² in words, without 'and' ("one hundred five")."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")
    for scale, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= scale:
            high, rest = divmod(n, scale)
            return f"{number_words(high)} {name}" + (f" {number_words(rest)}" if rest else "")
    raise AssertionError("unreachable")


def year_words(n: int) -> str:
    """1100–2099 as years are read: 1999 → nineteen ninety nine, 2005 → two thousand five."""
    high, low = divmod(n, 100)
    if 2000 <= n < 2010:
        return number_words(n)
    if low == 0:
        return f"{number_words(high)} hundred"
    return f"{number_words(high)} " + (f"oh {_ONES[low]}" if low < 10 else number_words(low))


def ordinal_words(n: int) -> str:
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _money(m: re.Match) -> str:
    whole = int(m.group(1).replace(",", ""))
    cents = int((m.group(2) or "0").ljust(2, "0")[:2])
    out = f"{number_words(whole)} dollar{'s' if whole != 1 else ''}"
    if cents:
        out += f" and {number_words(cents)} cent{'s' if cents != 1 else ''}"
    return f" {out} "


def _time(m: re.Match) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    if minute == 0:
        return f" {number_words(hour)} o'clock "
    spoken = f"oh {_ONES[minute]}" if minute < 10 else number_words(minute)
    return f" {number_words(hour)} {spoken} "


def _number(m: re.Match) -> str:
    digits, fraction = m.group(1).replace(",", ""), m.group(2)
    n = int(digits)
    if fraction is None and len(digits) == 4 and 1100 <= n <= 2099 and "," not in m.group(1):
        words = year_words(n)
    elif n >= 10**12:
        words = " ".join(_ONES[int(d)] for d in digits)
    else:
        words = number_words(n)
    if fraction:
        words += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return f" {words} "


def normalize(text: str) -> str:
    """Free text → lowercase words, spaces and , . ? ! ' only (what the model was trained on)."""
    text = unicodedata.normalize("NFKD", text)
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    text = (
        "".join(c for c in text if not unicodedata.combining(c)).encode("ascii", "ignore").decode()
    )
    text = re.sub(r"\$(\d[\d,]*)(?:\.(\d{1,2}))?\b", _money, text)
    text = re.sub(r"\b(\d{1,2}):(\d{2})\b", _time, text)
    text = re.sub(
        r"\b(\d+)(?:st|nd|rd|th)\b", lambda m: f" {ordinal_words(int(m.group(1)))} ", text
    )
    text = re.sub(r"(\d[\d,]*\d|\d)(?:\.(\d+))?", _number, text)
    for symbol, words in _SYMBOL_WORDS.items():
        text = text.replace(symbol, words)
    text = text.lower()
    text = re.sub(
        r"\b(" + "|".join(_ABBREVIATIONS) + r")\.(?=\s+\w)",
        lambda m: _ABBREVIATIONS[m.group(1)],
        text,
    )
    text = re.sub(r"[;:]", ",", text)
    text = re.sub(r"[-/_]", " ", text)
    text = re.sub(r"[^a-z ',.?!]", " ", text)
    text = re.sub(r"\s+([,.?!])", r"\1", text)
    text = re.sub(r"([,.?!])[,.?!]+", r"\1", text)
    text = re.sub(r"\s+", " ", text).strip(" ,")
    return text


@dataclass(frozen=True)
class SymbolTokenizer:
    """A tokenizer.json vocabulary: `symbols` (the specials first) → ids; `<bos>` opens the
    text, `<audio>` closes it. Subclasses say what a symbol is (`kind`: the tokenizer.json
    type) and how text becomes symbols (`encode`)."""

    kind: ClassVar[str] = ""
    symbols: tuple[str, ...] = ()
    normalizer: str = NORMALIZER

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ids", {s: i for i, s in enumerate(self.symbols)})

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def bos(self) -> int:
        return self._ids["<bos>"]

    @property
    def audio(self) -> int:
        return self._ids["<audio>"]

    def save(self, folder: Path) -> None:
        doc = {"type": self.kind, "normalizer": self.normalizer, "symbols": list(self.symbols)}
        (folder / "tokenizer.json").write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def from_doc(cls, doc: dict, path: Path):
        symbols = tuple(doc["symbols"])
        if symbols[: len(SPECIALS)] != SPECIALS:
            raise CheckpointError(f"{path}: the first symbols must be {SPECIALS}")
        return cls(symbols)


@dataclass(frozen=True)
class CharTokenizer(SymbolTokenizer):
    """Characters → ids of `symbols`."""

    kind: ClassVar[str] = "voxgate-chars"
    symbols: tuple[str, ...] = SYMBOLS

    def encode(self, normalized: str) -> list[int]:
        """Normalised text → `<bos>` + character ids + `<audio>` (characters outside the
        vocabulary are dropped; `normalize` never produces any)."""
        ids = [self._ids[c] for c in normalized if c in self._ids and len(c) == 1]
        return [self.bos, *ids, self.audio]

    @classmethod
    def load(cls, folder: Path) -> CharTokenizer:
        tokenizer = load_tokenizer(folder)
        if not isinstance(tokenizer, CharTokenizer):
            raise CheckpointError(f"{folder}/tokenizer.json is not a 'voxgate-chars' tokenizer")
        return tokenizer


def load_tokenizer(folder: Path):
    """tokenizer.json → the tokenizer it names: CharTokenizer ("voxgate-chars") or
    phone_text.PhoneTokenizer ("voxgate-phones"); both need this Voxgate's normaliser."""
    path = folder / "tokenizer.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {folder} lacks tokenizer.json") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None
    kinds = ("voxgate-chars", "voxgate-phones")
    if doc.get("type") not in kinds or doc.get("normalizer") != NORMALIZER:
        raise CheckpointError(
            f"{path} is a {doc.get('type')!r} tokenizer with normaliser "
            f"{doc.get('normalizer')!r}; this Voxgate reads {' or '.join(map(repr, kinds))} with "
            f"{NORMALIZER!r}: update Voxgate or use a matching checkpoint"
        )
    if doc["type"] == "voxgate-phones":
        from models.voxgate_tiny.phone_text import PhoneTokenizer

        return PhoneTokenizer.from_doc(doc, path)
    return CharTokenizer.from_doc(doc, path)
