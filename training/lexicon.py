"""Build voxgate-tiny's pronunciation lexicon from the teacher's own letter-to-phone front end.

Flite's `t2p "TEXT"` prints the phones (with stress digits) it would synthesise for TEXT. The
serving G2P (models/voxgate_tiny/g2p.py) must give the model the phones the teacher said, so the
lexicon is Flite's output, word by word: no outside pronunciation dictionary to license or drift.

Words: /usr/share/dict/words (wamerican, lowercased) ∪ every word training/sentences.py can write
∪ the words models/voxgate_tiny/text.py spells numbers, symbols and abbreviations with ∪ any
`--words FILE` (one word or more a line). Each goes through `normalize` and is kept when it is
one token of letters and apostrophes, the form g2p.word_phones receives.

Per word, not running text: Flite's post-lexical rules change a word by its neighbour ("the"
before a vowel is "dh iy"); the lexicon holds each word alone. One process per word is slow
(~100k words), so a call reads a batch "w1. w2. w3." : every full stop is a phrase break that
Flite prints as `pau`, which splits the output back into words. A batch whose `pau` count does
not match falls back to one call per word, and a random sample is checked against per-word calls.

Output: gzip text, `word TAB phones` (space-separated, stress removed), sorted by word.

    python -m training.lexicon --debs .teacher --out models/voxgate_tiny/lexicon.tsv.gz
"""

from __future__ import annotations

import argparse
import ast
import gzip
import inspect
import itertools
import multiprocessing as mp
import os
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path

from models.voxgate_tiny import text as text_module
from models.voxgate_tiny.text import normalize, number_words, ordinal_words
from training import sentences
from training.phones import PHONE_ID
from training.teacher import flite_command, unpack_debs

WORD_RE = re.compile(r"^[a-z']*[a-z][a-z']*$")
BATCH = 1000  # words per t2p call: ~0.3 s each; the command line stays far below ARG_MAX
STRESS = re.compile(r"[0-9]+$")


def as_word(raw: str) -> str | None:
    """A raw word → the single normalised token g2p would be asked for, or None."""
    norm = normalize(raw).strip(" ,.?!")
    return norm if WORD_RE.match(norm) else None


def dictionary_words(path: Path) -> set[str]:
    with open(path, encoding="utf-8", errors="ignore") as f:
        return {w for w in (as_word(line.strip()) for line in f) if w}


def _literal_words(module) -> set[str]:
    """Every word in the string literals of a module's source (f-string parts included): the
    template text of sentences.py that no word list holds."""
    out: set[str] = set()
    tree = ast.parse(inspect.getsource(module))
    docstrings = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
    }  # a bare string statement is documentation, not text the generator writes
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            out |= {w for w in (as_word(t) for t in normalize(node.value).split()) if w}
    return out


def sentence_words(samples: int = 60000) -> set[str]:
    """All words training/sentences.py can produce: its literals, plus a large sample of its
    sentences (which brings in the forms it builds, "relaxs", "studies", and spelled numbers)."""
    out = _literal_words(sentences)
    for seed in (1, 2, 3):
        for text in itertools.islice(sentences._unique(seed), samples // 3):
            out |= {w for w in (as_word(t) for t in normalize(text).split()) if w}
    for present, _past in sentences.INTRANSITIVE:  # "{verb_in}s" for each, as the template does
        out.add(as_word((present + "s ").replace("ys ", "ies ").replace("chs ", "ches ")) or "")
    out.discard("")
    return out


def number_vocabulary() -> set[str]:
    """The words text.py spells numbers, money, times, symbols and abbreviations with."""
    phrases = [number_words(n) for n in range(0, 1001)]
    phrases += [ordinal_words(n) for n in range(1, 1001)]
    for scale in (10**3, 10**6, 10**9):
        phrases += [number_words(scale), ordinal_words(scale)]
    phrases += list(text_module._ABBREVIATIONS.values()) + list(text_module._SYMBOL_WORDS.values())
    phrases += ["oh", "point", "dollar", "dollars", "cent", "cents", "o'clock", "and"]
    return {w for p in phrases for w in (as_word(t) for t in p.split()) if w}


def strip_stress(phones: list[str]) -> list[str]:
    return [STRESS.sub("", p) for p in phones]


class T2P:
    """Runs Flite's t2p from unpacked debs (or the system's, with root None)."""

    def __init__(self, root: Path | None):
        cmd, self.env = flite_command(root)
        self.exe = str(Path(cmd[0]).with_name("t2p"))

    def raw(self, text: str) -> list[str]:
        run = subprocess.run(
            [self.exe, text], env=self.env, check=True, capture_output=True, text=True
        )
        return run.stdout.split()

    def word(self, word: str) -> list[str]:
        """One word alone; pau (phrase edges) dropped."""
        return strip_stress([p for p in self.raw(word) if p != "pau"])

    def batch(self, words: list[str]) -> list[list[str]]:
        """Many words in one call, each its own phrase ("w1. w2. ..."): the `pau` between them
        splits the output back. Falls back to per-word calls when the split does not add up."""
        tokens = self.raw(" ".join(w + "." for w in words))
        groups, current = [], []
        for tok in tokens:
            if tok == "pau":
                if current:
                    groups.append(current)
                current = []
            else:
                current.append(tok)
        if current:
            groups.append(current)
        if len(groups) != len(words):
            return [self.word(w) for w in words]
        return [strip_stress(g) for g in groups]


_WORKER: T2P | None = None


def _init_worker(root: str | None) -> None:
    global _WORKER
    _WORKER = T2P(Path(root) if root else None)


def _run_batch(words: list[str]) -> list[tuple[str, list[str]]]:
    assert _WORKER is not None
    return list(zip(words, _WORKER.batch(words), strict=True))


def build(words: list[str], root: Path | None, workers: int) -> dict[str, list[str]]:
    batches = [words[i : i + BATCH] for i in range(0, len(words), BATCH)]
    out: dict[str, list[str]] = {}
    with mp.Pool(workers, _init_worker, (str(root) if root else None,)) as pool:
        for pairs in pool.imap_unordered(_run_batch, batches):
            out.update(pairs)
    return out


def verify_sample(lexicon: dict[str, list[str]], t2p: T2P, count: int, seed: int = 0) -> None:
    """Batched output must equal per-word output: check `count` random words one call each."""
    sample = random.Random(seed).sample(sorted(lexicon), min(count, len(lexicon)))
    bad = [(w, lexicon[w], t2p.word(w)) for w in sample if lexicon[w] != t2p.word(w)]
    if bad:
        w, got, want = bad[0]
        raise SystemExit(
            f"{len(bad)}/{len(sample)} batched words differ from per-word t2p, e.g. {w!r}: "
            f"batched {got} vs alone {want}"
        )
    print(f"verified {len(sample)} random words: batched == per-word")


def write_lexicon(lexicon: dict[str, list[str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{w}\t{' '.join(lexicon[w])}\n" for w in sorted(lexicon))
    # mtime=0: the same lexicon gives the same bytes (a reproducible committed file).
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(lines.encode())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--debs", type=Path, help="folder of the teacher .debs (make teacher-debs)")
    p.add_argument("--out", type=Path, default=Path("models/voxgate_tiny/lexicon.tsv.gz"))
    p.add_argument("--words", type=Path, nargs="*", default=[], help="extra word files")
    p.add_argument("--dict", type=Path, help="word list (default: the wamerican one)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--verify", type=int, default=300, help="words checked one call each")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = unpack_debs(args.debs, Path(tmp)) if args.debs else None
        dict_path = args.dict or (
            root / "usr/share/dict/words" if root else Path("/usr/share/dict/words")
        )
        words = dictionary_words(dict_path) | sentence_words() | number_vocabulary()
        for extra in args.words:
            words |= {w for w in map(as_word, extra.read_text().split()) if w}
        ordered = sorted(words)
        print(f"{len(ordered)} words; t2p on {args.workers} processes")
        start = time.time()
        lexicon = build(ordered, root, args.workers)
        print(f"t2p took {time.time() - start:.0f} s")
        empty = sorted(w for w, ph in lexicon.items() if not ph)
        if empty:
            print(f"dropping {len(empty)} words Flite gives no phones: {empty[:10]}")
            for w in empty:
                del lexicon[w]
        unknown = sorted({ph for phs in lexicon.values() for ph in phs if ph not in PHONE_ID})
        if unknown or any("pau" in phs for phs in lexicon.values()):
            raise SystemExit(f"phones outside PHONE_INVENTORY (or pau) in t2p output: {unknown}")
        verify_sample(lexicon, T2P(root), args.verify)
    write_lexicon(lexicon, args.out)
    print(f"wrote {len(lexicon)} words to {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
