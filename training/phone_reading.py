"""Training input for the phone-reading model (`training/speechlm.py --phones`): the phone
sequence the model reads (models/voxgate_tiny/phone_text.py, built from a lexicon as the serving
G2P builds it) and, per codec frame, the reading pointer into it, from the teacher's own phones
(phones-NN.npz: what Flite SAID and when).

Flite's said phones are its lexicon's phones of each word, back to back, changed here and there
by its post-lexical rules (reduced vowels, 'the' before vowels, ...), with `pau` at phrase
breaks. The input has the lexicon's phones, " " between words and the punctuation marks. A
monotone edit alignment maps each said phone to an input symbol:

- a phone to a phone (equal: free; another phone: a substitution),
- a `pau` to a boundary or mark (free; where a comma or full stop sits, the voice pauses),
- a said phone to nothing (an insertion: it keeps the pointer where it was),
- an input phone to nothing (the voice skipped it), a boundary or mark to nothing (free: most
  word boundaries have no pause).

A frame's pointer is the input symbol its said phone maps to (phones-NN.npz `phone_index`):
monotone, from the first symbol (the leading pause) to the last. The lexicon is a text file
(optionally gzipped): one word a line, TAB, its phones separated by spaces, no stress
(`python -m training.lexicon`, branch g2p: models/voxgate_tiny/lexicon.tsv.gz).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models.voxgate_tiny.phone_text import BOUNDARY, MARKS, PhoneSequence, phone_sequence
from models.voxgate_tiny.phones import PAUSE, PHONE_INVENTORY

_SUBSTITUTE, _SKIP_INPUT_PHONE, _INSERT, _PAU_ON_PHONE = 1.0, 1.0, 1.0, 1.5


def _cost(said: str, symbol: str) -> float:
    """Cost of matching said phone to input symbol (inf: never)."""
    if said == PAUSE:
        return 0.0 if symbol in (BOUNDARY, *MARKS) else _PAU_ON_PHONE
    if symbol in (BOUNDARY, *MARKS):
        return np.inf
    return 0.0 if said == symbol else _SUBSTITUTE


def align_said(said: list[str], symbols: list[str]) -> np.ndarray:
    """Each said phone's input symbol index (int64 [len(said)], monotone, 0..len(symbols)-1).

    Fast path: the said phones without pauses are the input's phones one for one (same count,
    a few substitutions), which is the common case; otherwise (or when many differ: a deletion
    and an insertion that cancel out shift everything between them) a full edit alignment."""
    phone_at = [j for j, s in enumerate(symbols) if s not in (BOUNDARY, *MARKS)]
    spoken = [i for i, p in enumerate(said) if p != PAUSE]
    out = np.full(len(said), -1, np.int64)
    differ = len(spoken) != len(phone_at) or sum(
        said[i] != symbols[j] for i, j in zip(spoken, phone_at, strict=True)
    ) > max(2, len(spoken) // 10)
    if differ:
        out = _edit_align(said, symbols)
    else:
        out[spoken] = phone_at
    _place_pauses(said, symbols, out)
    return out


def _edit_align(said: list[str], symbols: list[str]) -> np.ndarray:
    n, m = len(said), len(symbols)
    free_skip = np.array([s in (BOUNDARY, *MARKS) for s in symbols])
    cost = np.full((n + 1, m + 1), np.inf)
    move = np.zeros((n + 1, m + 1), np.int8)  # 0 match, 1 insert (said only), 2 skip input
    cost[0, 0] = 0.0
    for j in range(1, m + 1):
        cost[0, j] = cost[0, j - 1] + (0.0 if free_skip[j - 1] else _SKIP_INPUT_PHONE)
        move[0, j] = 2
    for i in range(1, n + 1):
        cost[i, 0], move[i, 0] = cost[i - 1, 0] + _INSERT, 1
        for j in range(1, m + 1):
            best, how = cost[i - 1, j - 1] + _cost(said[i - 1], symbols[j - 1]), 0
            if cost[i - 1, j] + _INSERT < best:
                best, how = cost[i - 1, j] + _INSERT, 1
            skip = cost[i, j - 1] + (0.0 if free_skip[j - 1] else _SKIP_INPUT_PHONE)
            if skip < best:
                best, how = skip, 2
            cost[i, j], move[i, j] = best, how
    out = np.full(n, -1, np.int64)
    i, j = n, m
    while i > 0:
        how = move[i, j]
        if how == 0:
            out[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif how == 1:
            i -= 1  # inserted: filled in below from its neighbours
        else:
            j -= 1
    # Pauses matched here are re-placed by _place_pauses; insertions keep the previous pointer.
    for i in range(n):
        if said[i] == PAUSE:
            out[i] = -1
    return out


def _place_pauses(said: list[str], symbols: list[str], out: np.ndarray) -> None:
    """Unmapped said phones (pauses, insertions) → a symbol between their neighbours: a pause
    the first boundary or mark after the previous phone's symbol (the comma it pauses at), an
    insertion the previous phone's symbol. The leading pause points at symbol 0."""
    last = len(symbols) - 1
    previous = -1
    for i, p in enumerate(said):
        if out[i] >= 0:
            previous = int(out[i])
            continue
        if p == PAUSE:
            nxt = next((int(x) for x in out[i + 1 :] if x >= 0), last + 1)
            spot = next(
                (
                    j
                    for j in range(previous + 1, min(nxt, last + 1))
                    if symbols[j] in (BOUNDARY, *MARKS)
                ),
                None,
            )
            out[i] = spot if spot is not None else max(previous, 0)
            if spot is not None:
                previous = spot
        else:
            out[i] = max(previous, 0)
    np.maximum.accumulate(out, out=out)


def frame_pointer(
    text: str,
    said_ids: np.ndarray,
    phone_index: np.ndarray,
    lexicon: dict[str, tuple[str, ...]],
) -> tuple[PhoneSequence, np.ndarray]:
    """One utterance: its normalised text, said phone ids (phones-NN.npz `phones`) and per-frame
    said-phone index → (the input phone sequence, per frame the input symbol index, int64).
    KeyError names a word the lexicon lacks."""
    sequence = phone_sequence(text, lexicon.__getitem__)
    said = [PHONE_INVENTORY[i] for i in said_ids]
    mapped = align_said(said, sequence.symbols)
    return sequence, mapped[np.asarray(phone_index, np.int64)]


def shard_inputs(
    tokens: Path, lengths: np.ndarray, texts: list[str], tokenizer, lexicon, skipped: dict
) -> list[tuple[list[int], np.ndarray] | None]:
    """tokens-NN.npz's utterances → per utterance (input ids with `<bos>`/`<audio>`, per-frame
    pointer into the ids without them), or None where it cannot train: no phones (the backfill
    refused it) or a word the lexicon lacks. `skipped` counts the reasons."""
    path = tokens.with_name(tokens.name.replace("tokens-", "phones-", 1))
    if not path.exists():
        raise SystemExit(
            f"--phones needs {path.name} beside {tokens.name}: `python -m training.codec encode` "
            f"writes it for new corpora, `python -m training.phones_backfill --tokens "
            f"{tokens.parent} --debs .teacher` for older ones"
        )
    d = np.load(path)
    index, phones = d["phone_index"], d["phones"]
    counts, starts = d["phone_counts"], d["phone_offsets"]
    if not np.array_equal(d["lengths"], lengths):
        raise SystemExit(f"{path.name} does not pair with {tokens.name}: their lengths differ")
    if json.loads(str(d["inventory"])) != list(PHONE_INVENTORY):
        raise SystemExit(f"{path.name} uses another phone inventory than this Voxgate's")
    frame_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out: list[tuple[list[int], np.ndarray] | None] = []
    for u, text in enumerate(texts):
        if counts[u] == 0:
            skipped["no phones"] = skipped.get("no phones", 0) + 1
            out.append(None)
            continue
        said = phones[starts[u] : starts[u] + counts[u]]
        frames = index[frame_starts[u] : frame_starts[u] + lengths[u]]
        try:
            sequence, pointer = frame_pointer(text, said, frames, lexicon)
        except KeyError as missing:
            skipped["word not in the lexicon"] = skipped.get("word not in the lexicon", 0) + 1
            if skipped["word not in the lexicon"] <= 5:
                print(f"  skipped (lexicon lacks {missing}): {text!r}", flush=True)
            out.append(None)
            continue
        out.append((tokenizer.ids(sequence.symbols), pointer))
    return out
