"""Stage 2: train VoxCodec on the teacher speech, then encode the whole corpus to codec tokens.

    python -m training.codec train  --teacher T --out CODEC [--seconds 240] [--config tiny]
    python -m training.codec encode --teacher T --codec CODEC --out TOKENS

Training: random crops of the 24 kHz audio (resampled from the teacher's 16 kHz), loss = L1 of
log-mel + multi-resolution STFT (log magnitude L1 + spectral convergence). No discriminator: the
target is intelligibility within a few GPU minutes, and the teacher is itself a buzzy
parametric voice. The first `warmup` frames of each crop are decoded but not scored: a crop
starts mid-utterance while the decoder's causal state starts from silence.

Encoding: one utterance at a time in length-sorted batches → `tokens-NN.npz` files (each under
15 MiB): `codes` uint16 [frames, K], `offsets`/`lengths` in frames, `texts`. When the teacher
corpus has phones (training/teacher.py), a `phones-NN.npz` goes next to each tokens file, laid
out like training/aligner.py's align-NN.npz but exact (from the teacher's own phone durations):
  phone_index  int16 [total frames]: per frame, the index (0..phone_counts[u]-1) of the phone
               sounding at the frame's centre (training/phones.py frame_phone_index);
               concatenated per utterance exactly like `codes` (same offsets and lengths).
  phones       int16 [total phones]: training/phones.py PHONE_INVENTORY id of each phone,
               utterances back to back; utterance u's are phones[phone_offsets[u]:][:phone_counts[u]]
  phone_offsets, phone_counts  int64 [utterances]
  lengths      int64 [utterances]: copy of the tokens file's, to check the pairing.
  inventory    JSON list of the phone names, the ids' meaning.
An utterance with phone_counts 0 has no phones (training/phones_backfill.py refused it: its
re-synthesis did not match the tokens) and phone_index -1 on its frames.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from models.codecs.voxcodec import LogMel, VoxCodec, VoxCodecConfig
from models.codecs.voxcodec_stream import load_voxcodec, save_voxcodec
from training.common import (
    TeacherCorpus,
    TimeBudget,
    autocast,
    descend,
    log_line,
    pick_device,
    resample,
)
from training.phones import PHONE_INVENTORY, frame_phone_index, phone_ids

CONFIGS = {
    "default": VoxCodecConfig(),
    # For CPU smoke runs of the pipeline: same layout, a fraction of the width.
    "toy": VoxCodecConfig(
        encoder_dim=64,
        encoder_blocks=2,
        decoder_dim=64,
        decoder_blocks=2,
        fine_dim=48,
        fine_blocks=2,
    ),
}
STFT_RESOLUTIONS = ((512, 128), (1024, 256), (2048, 512))


def corpus_24k(
    corpus: TeacherCorpus, device: torch.device, rate: int
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """All teacher audio resampled to `rate`, on `device` (float16 to halve its memory), with
    utterance offsets/lengths in the new rate."""
    ratio = rate / corpus.rate
    pieces, step = [], 16_000 * 600  # 10 minutes per resampling call
    for start in range(0, len(corpus.audio), step):
        chunk = torch.from_numpy(corpus.audio[start : start + step].astype(np.float32) / 32768.0)
        pieces.append(resample(chunk.to(device), corpus.rate, rate).half())
    audio = torch.cat(pieces)
    offsets = np.round(corpus.offsets * ratio).astype(np.int64)
    return audio, offsets, resampled_lengths(corpus.lengths, corpus.rate, rate)


def resampled_lengths(samples: np.ndarray, orig: int, rate: int) -> np.ndarray:
    """Utterance lengths in samples at `orig` Hz → at `rate` Hz, as corpus_24k resamples them."""
    return np.floor(np.asarray(samples) * (rate / orig)).astype(np.int64)


def encoded_frames(samples: np.ndarray, orig: int, config: VoxCodecConfig) -> np.ndarray:
    """Teacher utterance lengths (samples at `orig` Hz) → the codec frames `encode` gives them:
    resampled to the codec's rate, the last partial frame padded."""
    return -(-resampled_lengths(samples, orig, config.sample_rate) // config.hop_length)


class SpectralLoss(torch.nn.Module):
    def __init__(self, sample_rate: int) -> None:
        super().__init__()
        self.mel = LogMel(sample_rate, 1024, 256, 80)
        for n_fft, _ in STFT_RESOLUTIONS:
            self.register_buffer(f"win{n_fft}", torch.hann_window(n_fft), persistent=False)

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        pred, target = pred.float(), target.float()
        losses = {"mel": F.l1_loss(self.mel(pred), self.mel(target))}
        mag_l1, sc = 0.0, 0.0
        for n_fft, hop in STFT_RESOLUTIONS:
            win = getattr(self, f"win{n_fft}")
            p = torch.stft(pred, n_fft, hop, window=win, return_complex=True).abs().clamp(min=1e-5)
            t = (
                torch.stft(target, n_fft, hop, window=win, return_complex=True)
                .abs()
                .clamp(min=1e-5)
            )
            mag_l1 = mag_l1 + F.l1_loss(p.log(), t.log())
            sc = sc + torch.linalg.norm(t - p) / torch.linalg.norm(t)
        losses["stft"] = mag_l1 / len(STFT_RESOLUTIONS)
        losses["sc"] = sc / len(STFT_RESOLUTIONS)
        return losses


def train(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train_log.txt"
    corpus = TeacherCorpus.load(Path(args.teacher))
    config = CONFIGS[args.config]
    audio, _, _ = corpus_24k(corpus, device, config.sample_rate)
    hop = config.hop_length
    crop = args.crop_frames * hop
    warm = args.warmup_frames * hop
    log_line(
        log,
        f"codec: {corpus.hours:.2f} h of teacher audio, {len(corpus.texts)} utterances, device {device}",
    )
    codec = VoxCodec(config).to(device).train()
    loss_fn = SpectralLoss(config.sample_rate).to(device)
    opt = torch.optim.AdamW(
        codec.parameters(),
        lr=args.lr,
        betas=(0.8, 0.99),
        weight_decay=0.01,
        fused=device.type == "cuda",
    )
    budget = TimeBudget(args.seconds, args.lr, warmup=200, max_steps=args.max_steps)
    while not budget.done():
        starts = torch.randint(0, len(audio) - crop, (args.batch,), device=device)
        idx = starts[:, None] + torch.arange(crop, device=device)[None]
        wave = audio[idx].float()
        lr = budget.apply(opt)
        with autocast(device):
            recon, _ = codec.decode_latent(codec.encode_latent(wave))
        losses = loss_fn(recon[:, warm:], wave[:, warm:])
        loss = losses["mel"] + losses["stft"] + losses["sc"]
        descend(opt, loss, codec)
        if budget.step % args.log_every == 0 or budget.done():
            parts = " ".join(f"{k} {v.item():.3f}" for k, v in losses.items())
            log_line(log, f"step {budget.step} t {budget.elapsed:.0f}s lr {lr:.2e} {parts}")
    # bfloat16, as the shipped checkpoint stores it (and under the 16 MiB a file may travel);
    # `encode` then reads these very weights, so tokens and shipped decoder agree.
    save_voxcodec(codec.eval(), out, torch.bfloat16)
    log_line(log, f"codec saved to {out} after {budget.step} steps")


@torch.no_grad()
def encode(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    codec = load_voxcodec(args.codec, device)
    config = codec.config
    corpus = TeacherCorpus.load(Path(args.teacher))
    audio, offsets, lengths = corpus_24k(corpus, device, config.sample_rate)
    hop = config.hop_length
    frames = encoded_frames(corpus.lengths, corpus.rate, config)
    order = np.argsort(frames)
    codes: list[np.ndarray | None] = [None] * len(order)
    for start in range(0, len(order), args.batch):
        rows = order[start : start + args.batch]
        n = int(frames[rows].max())
        wave = torch.zeros(len(rows), n * hop, device=device)
        for i, r in enumerate(rows):
            wave[i, : lengths[r]] = audio[offsets[r] : offsets[r] + lengths[r]].float()
        with autocast(device):
            batch_codes = codec.encode(wave).cpu().numpy()
        for i, r in enumerate(rows):
            codes[r] = batch_codes[i, : frames[r]].astype(np.uint16)
    shards = write_tokens(Path(args.out), codes, corpus.texts, args.max_shard_mb)  # type: ignore[arg-type]
    if corpus.phones is not None:
        write_phones(Path(args.out), shards, corpus, frames, config.frame_rate)
    total = int(frames.sum())
    print(
        f"encoded {len(codes)} utterances, {total} frames ({total / config.frame_rate / 3600:.2f} h) → {args.out}",
        flush=True,
    )


def write_tokens(
    folder: Path, codes: list[np.ndarray], texts: list[str], max_shard_mb: float
) -> list[list[int]]:
    """Writes tokens-NN.npz; returns the utterance indices each shard holds, in order."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[list[int]] = []
    limit = max_shard_mb * 2**20
    shard, size, index = [], 0, 0

    def flush() -> None:
        nonlocal shard, size, index
        lengths = np.array([len(codes[i]) for i in shard], np.int64)
        np.savez_compressed(
            folder / f"tokens-{index:02d}.npz",
            codes=np.concatenate([codes[i] for i in shard]),
            offsets=np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64),
            lengths=lengths,
            texts=np.array(json.dumps([texts[i] for i in shard])),
        )
        written.append(shard)
        shard, size, index = [], 0, index + 1

    for i, c in enumerate(codes):
        if shard and size + c.nbytes > limit:
            flush()
        shard.append(i)
        size += c.nbytes
    if shard:
        flush()
    return written


def write_phones(
    folder: Path,
    shards: list[list[int]],
    corpus: TeacherCorpus,
    frames: np.ndarray,
    frame_rate: float,
) -> None:
    """phones-NN.npz next to each tokens-NN.npz (layout in the module docstring)."""
    assert corpus.phones is not None and corpus.phone_ends is not None
    for index, shard in enumerate(shards):
        write_phones_file(
            folder / f"phones-{index:02d}.npz",
            [corpus.phones[u] for u in shard],
            [corpus.phone_ends[u] for u in shard],
            frames[shard],
            frame_rate,
        )


def write_phones_file(
    path: Path,
    phones: list[list[str] | None],
    phone_ends: list[np.ndarray | None],
    frames: np.ndarray,
    frame_rate: float,
) -> None:
    """One phones-NN.npz (layout in the module docstring) for the utterances of one tokens file:
    their phone names, end times (seconds from the first encoded sample) and frame counts. An
    utterance without phones (None: training/phones_backfill.py refused it) gets phone_count 0
    and phone_index -1 on its frames; readers skip it."""
    ids = [phone_ids(p) if p is not None else np.zeros(0, np.int16) for p in phones]
    counts = np.array([len(p) for p in ids], np.int64)
    index = [
        frame_phone_index(e, int(n), frame_rate) if p is not None else np.full(int(n), -1, np.int16)
        for p, e, n in zip(phones, phone_ends, frames, strict=True)
    ]
    np.savez_compressed(
        path,
        phone_index=np.concatenate(index).astype(np.int16),
        phones=np.concatenate(ids).astype(np.int16),
        phone_offsets=np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64),
        phone_counts=counts,
        lengths=np.asarray(frames, np.int64),
        inventory=np.array(json.dumps(PHONE_INVENTORY)),
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the codec")
    t.add_argument("--teacher", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--config", choices=sorted(CONFIGS), default="default")
    t.add_argument("--seconds", type=float, default=240.0, help="wall-clock training budget")
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--crop-frames", type=int, default=96)
    t.add_argument("--warmup-frames", type=int, default=8)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--log-every", type=int, default=100)
    t.add_argument("--device", default="auto")
    e = sub.add_parser("encode", help="encode the teacher corpus to codec tokens")
    e.add_argument("--teacher", required=True)
    e.add_argument("--codec", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--batch", type=int, default=64)
    e.add_argument("--max-shard-mb", type=float, default=14.0)
    e.add_argument("--device", default="auto")
    args = p.parse_args(argv)
    (train if args.command == "train" else encode)(args)


if __name__ == "__main__":
    main()
