"""Train voxgate-tiny's letter-to-sound (LTS) model: the phones of words the lexicon lacks.

A grapheme-window classifier, as Flite's own LTS is, but an MLP instead of a tree: each letter,
with the CONTEXT letters on either side ('#' past the word's edges), predicts the chunk of 0..2
phones it emits (training/lts_align.py aligns the lexicon's letters to its phones). Serving
(models/voxgate_tiny/lts.py) runs it in numpy from `lts.npz`; torch is only used here.

Held out: 10 % of the lexicon by a hash of the word's stem (the word less a final "'s" or "s",
so "apple", "apples" and "apple's" land on the same side), never trained on; the script reports
word accuracy and phone error rate (edit distance / reference phones) on them.

    python -m training.lts --lexicon models/voxgate_tiny/lexicon.tsv.gz \
        --out models/voxgate_tiny/lts.npz
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from models.voxgate_tiny.g2p import read_lexicon
from models.voxgate_tiny.lts import ALPHABET, LetterToSound
from training.judge import edit_distance
from training.lts_align import align

MIN_CHUNK_COUNT = 3  # rarer chunks are alignment noise: their letters are not trained on


def lexicon_pairs(path: Path) -> list[tuple[str, list[str]]]:
    """The lexicon as (word, phones) pairs, in its (sorted) order."""
    return [(word, list(phones)) for word, phones in read_lexicon(path).items()]


def is_heldout(word: str) -> bool:
    stem = word.removesuffix("'s").removesuffix("s") or word
    return hashlib.md5(stem.encode()).digest()[0] < 26  # 26 / 256 ≈ 10 %


def windows(word: str, context: int) -> np.ndarray:
    """int64 [letters, 2·context+1]: letter ids around each letter (id 0 '#' past the edges)."""
    ids = [0] * context + [ALPHABET.index(c) for c in word] + [0] * context
    return np.array([ids[i : i + 2 * context + 1] for i in range(len(word))], np.int64)


class WindowMLP(torch.nn.Module):
    """One-hot window → hidden → hidden → chunk logits. The first layer is a sum of per-position
    embeddings (the same as a linear layer on the one-hot window, without building it)."""

    def __init__(self, width: int, hidden: int, classes: int):
        super().__init__()
        self.width = width
        self.embed = torch.nn.Embedding(width * len(ALPHABET), hidden)
        self.b1 = torch.nn.Parameter(torch.zeros(hidden))
        self.l2 = torch.nn.Linear(hidden, hidden)
        self.l3 = torch.nn.Linear(hidden, classes)

    def forward(self, window: torch.Tensor) -> torch.Tensor:  # [B, width] → [B, classes]
        offsets = torch.arange(self.width, device=window.device) * len(ALPHABET)
        h = torch.relu(self.embed(window + offsets).sum(1) + self.b1)
        return self.l3(torch.relu(self.l2(h)))


def train(
    pairs: list[tuple[str, list[str]]],
    context: int,
    hidden: int,
    epochs: int,
    seed: int,
    log=print,
) -> LetterToSound:
    aligned = align(pairs, log=log)
    freq = Counter(c for chunks in aligned.values() for c in chunks)
    chunks = sorted(c for c, k in freq.items() if k >= MIN_CHUNK_COUNT)
    chunk_id = {c: i for i, c in enumerate(chunks)}
    xs, ys = [], []
    for word, word_chunks in aligned.items():
        keep = [i for i, c in enumerate(word_chunks) if c in chunk_id]
        xs.append(windows(word, context)[keep])
        ys += [chunk_id[word_chunks[i]] for i in keep]
    x = torch.from_numpy(np.concatenate(xs))
    y = torch.tensor(ys)
    log(f"{len(x)} letters, {len(chunks)} chunks, {len(aligned)} aligned words")

    torch.manual_seed(seed)
    model = WindowMLP(2 * context + 1, hidden, len(chunks))
    batch = 512
    steps = epochs * ((len(x) + batch - 1) // batch)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        start, total = time.time(), 0.0
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        log(f"epoch {epoch + 1}/{epochs}: loss {total / len(x):.4f} ({time.time() - start:.0f} s)")

    with torch.no_grad():
        return LetterToSound(
            context=context,
            chunks=tuple(chunks),
            w1=model.embed.weight.numpy().copy(),
            b1=model.b1.numpy().copy(),
            w2=model.l2.weight.T.numpy().copy(),
            b2=model.l2.bias.numpy().copy(),
            w3=model.l3.weight.T.numpy().copy(),
            b3=model.l3.bias.numpy().copy(),
        )


def evaluate(lts: LetterToSound, pairs: list[tuple[str, list[str]]]) -> tuple[float, float]:
    """(word accuracy, phone error rate) of `lts` on `pairs`."""
    right, errors, phones = 0, 0, 0
    for word, ref in pairs:
        hyp = list(lts.phones(word))
        right += hyp == ref
        errors += edit_distance(hyp, ref)
        phones += len(ref)
    return right / len(pairs), errors / phones


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lexicon", type=Path, default=Path("models/voxgate_tiny/lexicon.tsv.gz"))
    p.add_argument("--out", type=Path, default=Path("models/voxgate_tiny/lts.npz"))
    p.add_argument("--context", type=int, default=4, help="letters each side")
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, help="train on the first N training words (tests)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    pairs = lexicon_pairs(args.lexicon)
    train_pairs = [wp for wp in pairs if not is_heldout(wp[0])][: args.limit]
    heldout = [wp for wp in pairs if is_heldout(wp[0])]
    print(f"{len(train_pairs)} training words, {len(heldout)} held out")
    lts = train(train_pairs, args.context, args.hidden, args.epochs, args.seed)
    lts.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")
    acc, per = evaluate(LetterToSound.load(args.out), heldout)
    print(f"held-out ({len(heldout)} words): word accuracy {acc:.1%}, phone error rate {per:.1%}")


if __name__ == "__main__":
    main()
