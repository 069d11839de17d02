"""voxgate-tiny's grapheme-to-phoneme front end: one normalised word → the teacher's phones.

The model reads the phones Flite (the teacher) said, so serving must turn text into the same
phones without Flite: first `lexicon.tsv.gz` (Flite's own t2p output for ~100k words, built by
training/lexicon.py), then, for words it lacks (names, new words), the letter-to-sound model
`lts.npz` (trained on that lexicon by training/lts.py; models/voxgate_tiny/lts.py).

Phones are PHONE_INVENTORY names without stress, never `pau`. Both files ship in this folder,
load once on first use (~0.3 s) and are pure Python/numpy.

`word_phones` is a word alone, as the model reads it (models/voxgate_tiny/phone_text.py): what
Flite changes in running text ("the" before a vowel is "dh iy", "a" before a word "ax") the
model learned from the teacher's audio, not from its input.
"""

from __future__ import annotations

import functools
import gzip
import re
import threading
from pathlib import Path

from models.voxgate_tiny.lts import LetterToSound
from models.voxgate_tiny.phones import PHONE_ID

HERE = Path(__file__).resolve().parent
LEXICON_PATH = HERE / "lexicon.tsv.gz"
LTS_PATH = HERE / "lts.npz"
WORD = re.compile(r"^[a-z']+$")

_lock = threading.Lock()
_lexicon: dict[str, tuple[str, ...]] | None = None
_lts: LetterToSound | None = None


class G2PDataMissing(FileNotFoundError):
    """lexicon.tsv.gz or lts.npz is not where voxgate-tiny's G2P reads it."""


def _require(path: Path, how: str) -> Path:
    if not path.is_file():
        raise G2PDataMissing(
            f"voxgate-tiny's G2P needs {path}, which is missing: it ships with the repository "
            f"(git checkout it, or rebuild it with `{how}`)"
        )
    return path


def read_lexicon(path: Path) -> dict[str, tuple[str, ...]]:
    """`word TAB phones` lines (gzip when the name ends in .gz) → {word: phones}; the one
    reader of the lexicon, for serving and training alike."""
    opener = gzip.open if str(path).endswith(".gz") else open
    out = {}
    with opener(_require(path, "python -m training.lexicon --debs .teacher"), "rt") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            word, sep, phones = line.partition("\t")
            if not sep:
                raise ValueError(f"{path}:{number}: expected WORD<TAB>PHONES, got {line!r}")
            out[word] = tuple(phones.split())
    return out


def _load() -> tuple[dict[str, tuple[str, ...]], LetterToSound]:
    global _lexicon, _lts
    with _lock:
        if _lexicon is None or _lts is None:
            lts = LetterToSound.load(_require(LTS_PATH, "python -m training.lts"))
            unknown = {p for c in lts.chunks for p in c.split() if p != "_" and p not in PHONE_ID}
            if unknown:
                raise ValueError(f"{LTS_PATH} emits phones outside PHONE_INVENTORY: {unknown}")
            _lexicon, _lts = read_lexicon(LEXICON_PATH), lts
        return _lexicon, _lts


@functools.lru_cache(maxsize=65536)
def word_phones(word: str) -> tuple[str, ...]:
    """One normalised lowercase word (letters and apostrophes, as text.normalize writes them)
    → its phones: the lexicon's, else the LTS model's. Apostrophes alone give ()."""
    if not WORD.match(word):
        raise ValueError(
            f"word_phones takes one lowercase word of letters and apostrophes, got {word!r}: "
            "run the text through models/voxgate_tiny/text.py normalize and split it on spaces"
        )
    lexicon, lts = _load()
    phones = lexicon.get(word)
    return phones if phones is not None else lts.phones(word)


def in_lexicon(word: str) -> bool:
    return word in _load()[0]
