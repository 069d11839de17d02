"""Stage 2c: align every training utterance's characters to its codec frames.

    python -m training.aligner train --tokens DIR [DIR ...] --out ALIGNER [--seconds 90]
    python -m training.aligner align --tokens DIR --aligner ALIGNER [--out DIR]

`train` fits a small CTC character recogniser over codec frames (training/aligner_model.py)
under a wall-clock budget (bf16 autocast on GPUs, AdamW, length-bucketed batches, 1 % of the
utterances held out for CTC loss and greedy character error rate) and saves it as
`model.safetensors` + `config.json` (+ `train_log.txt`).

`align` runs it over every `tokens-NN.npz` of a folder and forced-aligns each utterance's
characters (CTC Viterbi, training/ctc_viterbi.py), writing `align-NN.npz` next to it:
  char_index int16 [total frames]: per frame, the index (0..len(chars)-1) of the character
             spoken, where chars = CharTokenizer().encode(text)[1:-1] (no <bos>/<audio>);
             concatenated per utterance exactly like `codes` (same offsets and lengths).
             Blank frames carry the previous character; leading blanks character 0.
  score      float32 [utterances]: mean log-prob per frame of the Viterbi path (-inf: fewer
             frames than the text needs, alignment spread uniformly).
  lengths    int64 [utterances]: copy of the tokens file's, to check the pairing.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from models.voxgate_tiny.text import CharTokenizer
from training.aligner_model import (
    BLANK,
    SIZES,
    AlignerConfig,
    CharCTC,
    load_aligner,
    save_aligner,
)
from training.common import TimeBudget, autocast, descend, log_line, pick_device
from training.ctc_viterbi import forced_align, greedy_decode, min_frames
from training.judge import edit_distance


@dataclass
class TokenCorpus:
    codes: np.ndarray  # [frames, K] int32, all utterances back to back
    offsets: np.ndarray  # [N] int64 first frame of each utterance
    lengths: np.ndarray  # [N] int64 frames
    chars: list[np.ndarray]  # CharTokenizer ids of each text, without <bos>/<audio>

    def __len__(self) -> int:
        return len(self.lengths)


def read_shard(path: Path, tokenizer: CharTokenizer) -> TokenCorpus:
    d = np.load(path)
    # read each array once: `d[key]` decompresses the whole array on every access
    codes, offsets, lengths = d["codes"].astype(np.int32), d["offsets"], d["lengths"]
    chars = [np.array(tokenizer.encode(t)[1:-1], np.int64) for t in json.loads(str(d["texts"]))]
    if len(chars) != len(lengths) or int(lengths.sum()) != len(codes):
        raise SystemExit(f"{path}: texts/lengths/codes disagree; re-run training.codec encode")
    return TokenCorpus(codes, offsets.astype(np.int64), lengths.astype(np.int64), chars)


def shard_paths(folder: Path) -> list[Path]:
    paths = sorted(Path(folder).glob("tokens-*.npz"))
    if not paths:
        raise SystemExit(f"no tokens-*.npz in {folder}: run `python -m training.codec encode`")
    return paths


def load_corpus(folders: list[str], tokenizer: CharTokenizer) -> TokenCorpus:
    shards = [read_shard(p, tokenizer) for f in folders for p in shard_paths(Path(f))]
    bases = np.cumsum([0] + [len(s.codes) for s in shards[:-1]])
    return TokenCorpus(
        np.concatenate([s.codes for s in shards]),
        np.concatenate([s.offsets + base for s, base in zip(shards, bases, strict=True)]),
        np.concatenate([s.lengths for s in shards]),
        [c for s in shards for c in s.chars],
    )


def length_buckets(
    lengths: np.ndarray, frames_per_batch: int, rng: np.random.Generator | None = None
) -> list[np.ndarray]:
    """Utterance indices in length-sorted groups of at most `frames_per_batch` padded frames;
    with `rng`, ties broken and groups ordered at random (training), else in length order."""
    tie = rng.random(len(lengths)) if rng is not None else np.zeros(len(lengths))
    order = np.lexsort((tie, lengths))
    groups, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or (i - start + 1) * lengths[order[i]] > frames_per_batch:
            groups.append(order[start:i])
            start = i
    if rng is not None:
        rng.shuffle(groups)  # type: ignore[arg-type]
    return groups


@dataclass
class Batch:
    codes: torch.Tensor  # [B, T, K]
    lengths: torch.Tensor  # [B] frames
    targets: torch.Tensor  # [B, L] char ids, padded with the blank
    target_lengths: torch.Tensor  # [B]


def make_batch(
    corpus: TokenCorpus, codes: torch.Tensor, rows: np.ndarray, device: torch.device
) -> Batch:
    """`codes` is corpus.codes as a tensor (already on `device` for speed)."""
    lengths = corpus.lengths[rows]
    frames = np.minimum(np.arange(lengths.max())[None], lengths[:, None] - 1)
    index = torch.from_numpy(corpus.offsets[rows][:, None] + frames).to(codes.device)
    chars = [corpus.chars[r] for r in rows]
    target_lengths = np.array([len(c) for c in chars], np.int64)
    targets = np.full((len(rows), max(1, target_lengths.max())), BLANK, np.int64)
    for i, c in enumerate(chars):
        targets[i, : len(c)] = c
    return Batch(
        codes[index].to(device, non_blocking=True),
        torch.from_numpy(lengths).to(device),
        torch.from_numpy(targets).to(device),
        torch.from_numpy(target_lengths).to(device),
    )


def ctc_loss(log_probs: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean over utterances of CTC loss per target character."""
    return F.ctc_loss(
        log_probs.transpose(0, 1),  # [T, B, C]
        batch.targets,
        batch.lengths,
        batch.target_lengths,
        blank=BLANK,
        zero_infinity=True,
    )


@torch.no_grad()
def validate(
    model: CharCTC, corpus: TokenCorpus, codes: torch.Tensor, rows: np.ndarray, frames: int
) -> tuple[float, float]:
    """Held-out CTC loss (per character) and greedy character error rate."""
    model.eval()
    device = next(model.parameters()).device
    loss, weight, errors, total = 0.0, 0, 0, 0
    for group in length_buckets(corpus.lengths[rows], frames):
        batch = make_batch(corpus, codes, rows[group], device)
        with autocast(device):
            log_probs = model(batch.codes, batch.lengths)
        loss += ctc_loss(log_probs, batch).item() * len(group)
        weight += len(group)
        for r, hyp in zip(rows[group], greedy_decode(log_probs, batch.lengths), strict=True):
            errors += edit_distance(corpus.chars[r].tolist(), hyp)
            total += len(corpus.chars[r])
    model.train()
    return loss / max(1, weight), errors / max(1, total)


def train(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train_log.txt"
    tokenizer = CharTokenizer()
    corpus = load_corpus(args.tokens, tokenizer)
    rows = np.arange(len(corpus))
    if args.limit:
        rows = rng.permutation(rows)[: args.limit]
    alignable = np.array(
        [0 < min_frames(corpus.chars[r].tolist()) <= corpus.lengths[r] for r in rows], bool
    )
    rows = rng.permutation(rows[alignable])
    n_val = max(1, len(rows) // 100)
    val_rows, train_rows = np.sort(rows[:n_val]), rows[n_val:]
    config = AlignerConfig(
        vocab_size=tokenizer.vocab_size,
        num_codebooks=corpus.codes.shape[1],
        **SIZES[args.size],
    )
    if int(corpus.codes.max()) >= config.codebook_size:
        raise SystemExit(
            f"codes reach {corpus.codes.max()} ≥ codebook stride {config.codebook_size}"
        )
    model = CharCTC(config).to(device).train()
    codes = torch.from_numpy(corpus.codes).to(device)
    frames = int(corpus.lengths[train_rows].sum())
    log_line(
        log,
        f"aligner: {len(train_rows)} utterances ({frames / args.frame_rate / 3600:.2f} h), "
        f"{len(val_rows)} held out, {int((~alignable).sum())} too short to align, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, device {device}",
    )
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01,
        fused=device.type == "cuda",
    )  # fmt: skip
    budget = TimeBudget(args.seconds, args.lr, args.warmup, args.max_steps)
    epoch = 0
    while not budget.done():
        epoch += 1
        for group in length_buckets(corpus.lengths[train_rows], args.batch_frames, rng):
            batch = make_batch(corpus, codes, train_rows[group], device)
            lr = budget.apply(opt)
            with autocast(device):
                loss = ctc_loss(model(batch.codes, batch.lengths), batch)
            descend(opt, loss, model)
            if budget.step % args.log_every == 0:
                log_line(
                    log,
                    f"epoch {epoch} step {budget.step} t {budget.elapsed:.0f}s lr {lr:.2e} "
                    f"ctc {loss.item():.3f}",
                )
            if args.val_every and budget.step % args.val_every == 0:
                held, cer = validate(model, corpus, codes, val_rows, args.batch_frames)
                log_line(log, f"held-out step {budget.step}: ctc {held:.3f} cer {cer:.3%}")
            if budget.done():
                break
    held, cer = validate(model, corpus, codes, val_rows, args.batch_frames)
    log_line(
        log,
        f"done: {budget.step} steps, {epoch} epochs, {budget.elapsed:.0f}s; "
        f"held-out ctc {held:.3f} cer {cer:.3%}",
    )
    save_aligner(model.eval(), out)
    log_line(log, f"aligner saved to {out}")


@torch.no_grad()
def align(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    model = load_aligner(Path(args.aligner), device)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    tokenizer = CharTokenizer()
    for path in shard_paths(Path(args.tokens)):
        start = time.monotonic()
        shard = read_shard(path, tokenizer)
        codes = torch.from_numpy(shard.codes).to(device)
        char_index = np.zeros(len(shard.codes), np.int16)
        score = np.zeros(len(shard), np.float32)
        for rows in length_buckets(shard.lengths, args.batch_frames):
            batch = make_batch(shard, codes, rows, device)
            with autocast(device):
                log_probs = model(batch.codes, batch.lengths)
            result = forced_align(
                log_probs, batch.lengths, batch.targets, batch.target_lengths, BLANK
            )
            index = result.char_index.cpu().numpy().astype(np.int16)
            score[rows] = result.score.cpu().numpy()
            for i, r in enumerate(rows):
                off, n = shard.offsets[r], shard.lengths[r]
                char_index[off : off + n] = index[i, :n]
        target = Path(args.out or path.parent) / path.name.replace("tokens-", "align-")
        np.savez_compressed(target, char_index=char_index, score=score, lengths=shard.lengths)
        bad = ~np.isfinite(score)
        print(
            f"{target}: {len(shard)} utterances, {len(shard.codes)} frames in "
            f"{time.monotonic() - start:.1f}s; mean score {score[~bad].mean():.3f}, "
            f"{int(bad.sum())} not alignable",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the CTC character recogniser")
    t.add_argument("--tokens", nargs="+", required=True, help="folders of tokens-NN.npz")
    t.add_argument("--out", required=True, help="aligner folder to write")
    t.add_argument("--size", choices=sorted(SIZES), default="default")
    t.add_argument("--seconds", type=float, default=90.0, help="wall-clock training budget")
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--limit", type=int, default=0, help="use only this many utterances (0: all)")
    t.add_argument("--batch-frames", type=int, default=32_000, help="padded frames per batch")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=150)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--val-every", type=int, default=500, help="0: only at the end")
    t.add_argument("--frame-rate", type=float, default=50.0, help="codec frames/s (for logs)")
    t.add_argument("--device", default="auto")
    a = sub.add_parser("align", help="write align-NN.npz next to each tokens-NN.npz")
    a.add_argument("--tokens", required=True)
    a.add_argument("--aligner", required=True)
    a.add_argument(
        "--out", help="write align-NN.npz here instead of next to the tokens (read-only copies)"
    )
    a.add_argument("--batch-frames", type=int, default=64_000)
    a.add_argument("--device", default="auto")
    args = p.parse_args(argv)
    (train if args.command == "train" else align)(args)


if __name__ == "__main__":
    main()
