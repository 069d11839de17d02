"""The SpeechLM's training data (training/speechlm.py): token shards → utterances (text ids, codec
rows, reading pointers) → padded batches with their targets.

A training sequence is exactly what the engine will see: `<bos>`, text symbols (characters or
phones), `<audio>` (text rows), then one row per `frames_per_row` codec frames. Position p is
scored on row p+1 (make_batch). With a reading pointer each frame row also carries the text
symbol at the pointer, the next one and the pointer (reading_columns), as
VoxgateTinyModel.follow_row writes them when served.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.voxgate_tiny.lm import READ_ADVANCES
from models.voxgate_tiny.phone_text import PhoneTokenizer
from models.voxgate_tiny.text import CharTokenizer
from training.common import log_line
from training.phone_reading import shard_inputs

IGNORE = -100


@dataclass
class Utterance:
    text_ids: list[int]
    codes: np.ndarray  # [rows, K] uint16
    pointer: np.ndarray | None = None  # [rows] aligned character index (reading_rows)

    def __len__(self) -> int:
        return len(self.text_ids) + len(self.codes)


def reading_rows(text_ids: list[int], char_index: np.ndarray, frames_per_row: int) -> np.ndarray:
    """The aligner's character index per codec frame (into the text's characters, i.e.
    `text_ids` without `<bos>`/`<audio>`) → each row's pointer: the character at its last
    frame."""
    n_chars = len(text_ids) - 2
    n = len(char_index)
    last = np.minimum(np.arange(frames_per_row - 1, n + frames_per_row - 1, frames_per_row), n - 1)
    pointer = np.asarray(char_index, np.int64)[last]
    if n_chars <= 0 or pointer.min() < 0 or pointer.max() >= n_chars:
        raise ValueError(f"alignment points outside the text's {n_chars} characters")
    return pointer


def reading_columns(
    text_ids: list[int], pointer: np.ndarray, text_vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows' pointers → their three reading columns [rows, 3] (the character, the next one or
    past-the-end, the pointer: as VoxgateTinyModel.follow_row writes them when served) and the
    advance targets [rows] (characters moved since the row before, from 0; at most 3)."""
    chars = np.asarray(text_ids[1:-1], np.int64)
    following = np.append(chars, -1)[pointer + 1]
    columns = np.stack(
        [
            text_vocab + chars[pointer],
            np.where(following >= 0, 2 * text_vocab + following, 3 * text_vocab),
            pointer,
        ],
        axis=1,
    )
    advance = np.diff(pointer, prepend=0).clip(0, READ_ADVANCES - 1)
    return columns, advance


def group_frames(codes: np.ndarray, frames_per_row: int) -> np.ndarray:
    """Codec frames [n, K] → rows [ceil(n / f), f·K]: f consecutive frames a row. An odd
    tail repeats the last frame (the trimmed teacher audio ends in silence)."""
    short = -len(codes) % frames_per_row
    if short:
        codes = np.concatenate([codes, np.repeat(codes[-1:], short, axis=0)])
    return codes.reshape(len(codes) // frames_per_row, -1)


def model_rows_per_s(config: dict) -> float:
    codec = config["codec_config"]
    return codec["sample_rate"] / codec["hop_length"] / config["frames_per_row"]


def load_tokens(
    folder: Path,
    tokenizer: CharTokenizer | PhoneTokenizer,
    frames_per_row: int = 1,
    reading: bool = False,
    lexicon: dict[str, tuple[str, ...]] | None = None,
    log: Path | None = None,
) -> list[Utterance]:
    """Every tokens-NN.npz of `folder`. With `lexicon` (phone input): the phone sequences and
    pointers of training/phone_reading.py; utterances without phones or with a word outside
    the lexicon are dropped (counted in the log)."""
    files = sorted(Path(folder).glob("tokens-*.npz"))
    if not files:
        raise SystemExit(
            f"no tokens-*.npz in {folder}: run `python -m training.codec encode` first"
        )
    out = []
    skipped: dict[str, int] = {}
    for path in files:
        d = np.load(path)
        # Each `d[key]` decompresses the whole array again: read every array once (indexing
        # d["codes"] per utterance made loading quadratic: minutes for a 10-hour corpus).
        codes, texts = d["codes"], json.loads(str(d["texts"]))
        offsets, lengths = d["offsets"], d["lengths"]
        if lexicon is not None:
            inputs = shard_inputs(path, lengths, texts, tokenizer, lexicon, skipped)
            for item, off, n in zip(inputs, offsets, lengths, strict=True):
                if item is not None:
                    ids, index = item
                    rows = group_frames(codes[off : off + n], frames_per_row)
                    out.append(Utterance(ids, rows, reading_rows(ids, index, frames_per_row)))
            continue
        index = _char_index(path) if reading else None
        for text, off, n in zip(texts, offsets, lengths, strict=True):
            ids = tokenizer.encode(text)
            rows = group_frames(codes[off : off + n], frames_per_row)
            pointer = None
            if index is not None:
                pointer = reading_rows(ids, index[off : off + n], frames_per_row)
            out.append(Utterance(ids, rows, pointer))
    if lexicon is not None:
        shown = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
        log_line(log, f"phones: {len(out)} utterances read as phones; dropped: {shown}")
    return out


def prefetched_batches(
    groups: list[list[Utterance]], k: int, eos: int, text_vocab: int, workers: int, pin: bool
) -> Iterable[dict[str, torch.Tensor]]:
    """make_batch of each group, in order. With `workers` > 0 the batches are made that many
    processes ahead of the training step (make_batch is ~30 ms of numpy per 40k-row batch, a
    third of a run 7 step that the GPU otherwise waits through), in pinned memory when `pin`
    so the copy to the GPU is asynchronous."""
    make = functools.partial(make_batch, k=k, eos=eos, text_vocab=text_vocab)
    if workers <= 0:
        return map(make, groups)
    return torch.utils.data.DataLoader(
        groups,  # one group a sample, made whole by `make` (automatic batching off)
        batch_size=None,
        num_workers=workers,
        collate_fn=make,
        pin_memory=pin,
        prefetch_factor=4,
        multiprocessing_context="fork",  # the utterances stay shared with the workers
    )


class ShardFeed:
    """Token folders that another process finishes while the model trains (the teacher loop of
    training/grow_data.sh): a deterministic teacher makes every utterance learnable, so the
    model memorises a fixed corpus (run 7 overfit at 30 h), and fresh speech made on the GPU
    machine's idle CPU cores during training lifts that limit without carrying it there.

    A folder counts once it is whole: the writer fills `NAME.tmp` and renames it to `NAME`, so
    names ending in `.tmp` are skipped until then. Each folder is read once, in name order."""

    def __init__(self, folder: Path, read: Callable[[Path], list[Utterance]]) -> None:
        self.folder = Path(folder)
        self.read = read
        self._taken: set[str] = set()

    def take(self) -> list[tuple[Path, list[Utterance]]]:
        """The folders finished since the last call, with their utterances."""
        if not self.folder.is_dir():
            return []
        fresh = [
            d
            for d in sorted(self.folder.iterdir())
            if d.is_dir() and not d.name.endswith(".tmp") and d.name not in self._taken
        ]
        self._taken.update(d.name for d in fresh)
        return [(d, self.read(d)) for d in fresh]


def _char_index(tokens: Path) -> np.ndarray:
    path = tokens.with_name(tokens.name.replace("tokens-", "align-", 1))
    if not path.exists():
        raise SystemExit(
            f"--reading needs {path.name} beside {tokens.name}: run `python -m training.aligner "
            f"align --tokens {tokens.parent} --aligner <aligner folder>` first"
        )
    return np.load(path)["char_index"]


def make_batch(
    utts: list[Utterance], k: int, eos: int, text_vocab: int = 0
) -> dict[str, torch.Tensor]:
    """Rows [B, L, W] and targets: `first` [B, L] (codebook 0 / eos / IGNORE), `codes`
    [B, L, K] (the next frame's codes where the next row is a frame, else IGNORE) and `read`
    [B, L] (the next frame's pointer advance, IGNORE without reading). W is K+1, or K+3 when
    the utterances carry pointers (frame rows then hold reading_columns, text rows their symbol
    index in the last column, as VoxgateTinyModel.prompt_rows writes them)."""
    length = max(len(u) for u in utts)
    b = len(utts)
    reading = any(u.pointer is not None for u in utts)
    rows = np.full((b, length, k + (3 if reading else 1)), -1, np.int64)
    first = np.full((b, length), IGNORE, np.int64)
    codes = np.full((b, length, k), IGNORE, np.int64)
    read = np.full((b, length), IGNORE, np.int64)
    for i, u in enumerate(utts):
        t, n = len(u.text_ids), len(u.codes)
        rows[i, :t, k] = u.text_ids
        rows[i, t : t + n, :k] = u.codes
        # Row p predicts row p+1: the last text row predicts frame 0, the last frame predicts eos.
        first[i, t - 1 : t - 1 + n] = u.codes[:, 0]
        first[i, t - 1 + n] = eos
        codes[i, t - 1 : t - 1 + n] = u.codes
        if u.pointer is not None:
            rows[i, 1 : t - 1, k + 2] = np.arange(t - 2)  # symbols' own index (prompt_rows)
            columns, advance = reading_columns(u.text_ids, u.pointer, text_vocab)
            rows[i, t : t + n, k:] = columns
            read[i, t - 1 : t - 1 + n] = advance
    return {
        "rows": torch.from_numpy(rows),
        "first": torch.from_numpy(first),
        "codes": torch.from_numpy(codes),
        "read": torch.from_numpy(read),
    }


def batches(
    utts: list[Utterance], tokens_per_batch: int, rng: random.Random
) -> list[list[Utterance]]:
    """Length-sorted buckets of about `tokens_per_batch` rows (padding included), shuffled."""
    order = sorted(range(len(utts)), key=lambda i: (len(utts[i]), rng.random()))
    out, current = [], []
    for i in order:
        longest = len(utts[i])  # sorted: the newest is the longest
        if current and (len(current) + 1) * longest > tokens_per_batch:
            out.append(current)
            current = []
        current.append(utts[i])
    if current:
        out.append(current)
    rng.shuffle(out)
    return out
