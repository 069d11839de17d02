"""Letter-to-phone alignment for the LTS model (training/lts.py): each letter of a word emits
0, 1 or 2 phones ("x" → "k s", the "e" of "cake" → nothing), in order.

Hard EM: start from positional co-occurrence counts (a letter and a phone at about the same
relative place in their word), then alternate a Viterbi alignment of every word under the
current log P(chunk | letter) with re-estimating those probabilities from the alignments.
A word with more than twice as many phones as letters (Flite spelled it: "bbc") is skipped.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

EPSILON = "_"  # the chunk a silent letter emits
MAX_CHUNK = 2  # phones one letter may emit


def _initial_counts(pairs: list[tuple[str, list[str]]]) -> dict[str, Counter]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for word, phones in pairs:
        n, m = len(word), len(phones)
        for i, letter in enumerate(word):
            centre = (i + 0.5) / n
            for j, phone in enumerate(phones):
                if abs((j + 0.5) / m - centre) < 1.0 / max(n, m):
                    counts[letter][phone] += 1.0
        counts_eps = max(0, n - m)
        for letter in word:
            counts[letter][EPSILON] += counts_eps / n
    return counts


def _log_probs(counts: dict[str, Counter], pair_floor: float) -> dict[str, dict[str, float]]:
    """Smoothed log P(chunk | letter); unseen chunks get log(pair_floor / total)."""
    table = {}
    for letter, c in counts.items():
        total = sum(c.values()) + 1.0
        table[letter] = {chunk: math.log((k + 0.01) / total) for chunk, k in c.items()}
        table[letter][""] = math.log(pair_floor / total)  # fallback for unseen chunks
    return table


def _chunk_score(table: dict[str, dict[str, float]], letter: str, chunk: str) -> float:
    row = table.get(letter)
    if row is None:
        return -30.0
    score = row.get(chunk)
    if score is not None:
        return score
    # an unseen pair: as likely as its two halves from this letter, times a penalty
    return row[""] - 5.0 if " " in chunk else row[""]


def viterbi(word: str, phones: list[str], table) -> list[str] | None:
    """The best chunks (one per letter) that spell `phones` in order, or None if impossible."""
    n, m = len(word), len(phones)
    if m > MAX_CHUNK * n:
        return None
    neg = -math.inf
    best = [[neg] * (m + 1) for _ in range(n + 1)]
    back = [[0] * (m + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for i in range(n):
        letter = word[i]
        row, nxt, nback = best[i], best[i + 1], back[i + 1]
        lo = max(0, m - MAX_CHUNK * (n - i))  # phones left must fit in the letters left
        for j in range(lo, min(m, MAX_CHUNK * i) + 1):
            base = row[j]
            if base == neg:
                continue
            for k in range(0, min(MAX_CHUNK, m - j) + 1):
                chunk = EPSILON if k == 0 else " ".join(phones[j : j + k])
                s = base + _chunk_score(table, letter, chunk)
                if s > nxt[j + k]:
                    nxt[j + k] = s
                    nback[j + k] = k
    if best[n][m] == neg:
        return None
    chunks, j = [], m
    for i in range(n, 0, -1):
        k = back[i][j]
        chunks.append(EPSILON if k == 0 else " ".join(phones[j - k : j]))
        j -= k
    return chunks[::-1]


def align(
    pairs: list[tuple[str, list[str]]], iterations: int = 4, log=print
) -> dict[str, list[str]]:
    """word → one chunk per letter, for every word that aligns."""
    counts = _initial_counts(pairs)
    aligned: dict[str, list[str]] = {}
    for it in range(iterations):
        table = _log_probs(counts, pair_floor=0.01 if it == 0 else 0.001)
        counts = defaultdict(Counter)
        aligned = {}
        total = 0.0
        for word, phones in pairs:
            chunks = viterbi(word, phones, table)
            if chunks is None:
                continue
            aligned[word] = chunks
            for letter, chunk in zip(word, chunks, strict=True):
                counts[letter][chunk] += 1
                total += table[letter].get(chunk, 0.0)
        log(f"align iteration {it + 1}: {len(aligned)}/{len(pairs)} words, log p {total:.0f}")
    return aligned
