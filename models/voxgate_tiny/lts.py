"""voxgate-tiny's letter-to-sound model in numpy: phones for words the lexicon lacks.

Each letter, seen with `context` letters on either side ('#' past the word's edges), picks the
chunk of 0..2 phones it emits ("_" = silent, "k s" for the x of "box"); the word's phones are
the chunks in order. The classifier is a small MLP trained by training/lts.py; its first layer
is a table [window position · letter, hidden] whose rows are summed (a linear layer on the
one-hot window without building it). Weights are float16 in `lts.npz`, float32 in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

ALPHABET = "#'abcdefghijklmnopqrstuvwxyz"  # '#' (id 0) pads the window past the word's edges
SILENT = "_"
FORMAT = "voxgate-lts-v1"


@dataclass(frozen=True)
class LetterToSound:
    context: int  # letters each side of the one being read
    chunks: tuple[str, ...]  # class id → "_" or 1..2 space-separated phones
    w1: np.ndarray  # [(2·context+1)·len(ALPHABET), hidden]
    b1: np.ndarray  # [hidden]
    w2: np.ndarray  # [hidden, hidden]
    b2: np.ndarray  # [hidden]
    w3: np.ndarray  # [hidden, chunks]
    b3: np.ndarray  # [chunks]

    def windows(self, word: str) -> np.ndarray:
        """int64 [letters, 2·context+1]: rows of w1 to sum for each letter."""
        pad = [0] * self.context
        try:
            ids = pad + [ALPHABET.index(c) for c in word] + pad
        except ValueError:
            raise ValueError(
                f"{word!r} has characters outside {ALPHABET[1:]!r}: pass words made by "
                "models/voxgate_tiny/text.py normalize"
            ) from None
        width = 2 * self.context + 1
        index = np.lib.stride_tricks.sliding_window_view(np.array(ids, np.int64), width)
        return index + np.arange(width) * len(ALPHABET)

    def phones(self, word: str) -> tuple[str, ...]:
        if not word:
            return ()
        h = np.maximum(self.w1[self.windows(word)].sum(1) + self.b1, 0)  # [letters, hidden]
        h = np.maximum(h @ self.w2 + self.b2, 0)
        best = (h @ self.w3 + self.b3).argmax(1)  # [letters]
        return tuple(p for i in best for p in self.chunks[i].split() if p != SILENT)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # float16 on disk (half the size; the argmax is what matters), float32 in memory
        arrays = {
            k: getattr(self, k).astype(np.float16) for k in ("w1", "b1", "w2", "b2", "w3", "b3")
        }
        with open(path, "wb") as f:
            np.savez_compressed(
                f,
                format=np.array(FORMAT),
                context=np.array(self.context),
                chunks=np.array(self.chunks),
                **arrays,
            )

    @classmethod
    def load(cls, path: Path) -> LetterToSound:
        with np.load(path, allow_pickle=False) as z:
            if str(z["format"]) != FORMAT:
                raise ValueError(f"{path} is a {z['format']} LTS model; this reads {FORMAT}")
            arrays = {k: z[k].astype(np.float32) for k in ("w1", "b1", "w2", "b2", "w3", "b3")}
            return cls(int(z["context"]), tuple(str(c) for c in z["chunks"]), **arrays)
