"""Give token folders made before the teacher recorded phones their `phones-NN.npz`.

    python -m training.phones_backfill --tokens DIR [DIR ...] --debs .teacher [--workers 2]
                                       [--out DIR] [--limit N]

Flite is deterministic: the teacher's own call (training/teacher.py `synthesize`, the same
`.teacher` debs) on an utterance's normalised text (the tokens file's `texts`) writes the same
audio and prints its phones with end times; `trim_bounds` cuts the same silence. So each
utterance's phones come back exactly, and the re-synthesised audio's codec frame count
(training/codec.py `encoded_frames`) must equal the tokens' `lengths`. An utterance whose count
differs by more than one frame is REFUSED (another Flite, or another text): it keeps phone_count
0 in the output (training skips it), and the command prints how many. The file is written by
codec.py's own writer (`write_phones_file`), so it is what `codec encode` would have written.

One phones-NN.npz per tokens-NN.npz that has none (next to it, or in --out: same name); files
already there are kept. --limit N does only the first N utterances of each file and writes
nothing: to measure speed and agreement before a long run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.codecs.voxcodec import VoxCodecConfig
from training.codec import encoded_frames, write_phones_file
from training.teacher import TEACHER_RATE, flite_command, synthesize, trim_bounds, unpack_debs

# A phone boundary is only known to half a frame anyway; one frame of slack absorbs a rounding
# difference in the trim, more means the audio is not the one the tokens encode.
MAX_FRAME_DIFFERENCE = 1


@dataclass
class Resynthesis:
    phones: list[str]
    phone_ends: np.ndarray  # float64 [phones] seconds from the first kept (trimmed) sample
    frames: int  # codec frames of the trimmed audio


_FLITE: tuple[list[str], dict[str, str]] | None = None


def _init(cmd: list[str], env: dict[str, str]) -> None:
    global _FLITE
    _FLITE = (cmd, env)


def resynthesize(text: str, config: VoxCodecConfig) -> Resynthesis:
    """The teacher's call on `text` → its phones, times shifted to the trimmed audio, frames."""
    assert _FLITE is not None
    cmd, env = _FLITE
    with tempfile.TemporaryDirectory() as tmp:
        spoken = synthesize(cmd, env, text, Path(tmp))
    start, end = trim_bounds(spoken.audio)
    frames = int(encoded_frames(np.array([end - start]), TEACHER_RATE, config)[0])
    # Through float32 as the teacher's shard stores them (TeacherCorpus.load reads them back
    # as float64): a frame centre right on a phone boundary then falls on the same side.
    ends = spoken.phone_ends.astype(np.float32).astype(np.float64)
    return Resynthesis(spoken.phones, ends - start / TEACHER_RATE, frames)


def _job(args: tuple[str, VoxCodecConfig]) -> Resynthesis:
    return resynthesize(*args)


@dataclass
class ShardResult:
    utterances: int
    refused: int
    exact: int  # frame counts equal to the tokens'
    seconds: float


def backfill_file(
    tokens: Path, out: Path | None, config: VoxCodecConfig, pool, limit: int | None = None
) -> ShardResult:
    """Re-synthesise every utterance of `tokens` and write `out` (None: measure only)."""
    t0 = time.monotonic()
    d = np.load(tokens)
    texts, lengths = json.loads(str(d["texts"])), d["lengths"]
    if limit is not None:
        texts, lengths = texts[:limit], lengths[:limit]
    phones: list[list[str] | None] = []
    ends: list[np.ndarray | None] = []
    refused = exact = 0
    done = pool.imap(_job, [(t, config) for t in texts], chunksize=16)
    for i, (text, n, got) in enumerate(zip(texts, lengths, done, strict=True)):
        diff = got.frames - int(n)
        exact += diff == 0
        if abs(diff) > MAX_FRAME_DIFFERENCE:
            refused += 1
            phones.append(None)
            ends.append(None)
            if refused <= 5:
                print(f"  refused {tokens.name}[{i}]: {got.frames} frames, tokens {n}: {text!r}")
        else:
            phones.append(got.phones)
            ends.append(got.phone_ends)
        if (i + 1) % 2000 == 0:
            rate = (i + 1) / (time.monotonic() - t0)
            print(f"  {tokens.name}: {i + 1}/{len(texts)}, {rate:.1f}/s", flush=True)
    if out is not None:
        write_phones_file(out, phones, ends, lengths, config.frame_rate)
    return ShardResult(len(texts), refused, exact, time.monotonic() - t0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tokens", nargs="+", required=True, help="folders of tokens-NN.npz")
    p.add_argument(
        "--debs",
        help="the teacher's .deb folder (make teacher-debs); default: the system's flite, which "
        "must be the same Flite version the teacher ran",
    )
    p.add_argument("--out", help="write phones-NN.npz here instead of next to the tokens")
    p.add_argument("--codec", help="codec folder (its config.json); default VoxCodec's defaults")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--limit", type=int, help="first N utterances per file; measure, write nothing")
    args = p.parse_args(argv)

    config = VoxCodecConfig()
    if args.codec:
        config = VoxCodecConfig.from_dict(
            json.loads((Path(args.codec) / "config.json").read_text())
        )
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack_debs(Path(args.debs), Path(tmp) / "root") if args.debs else None
        cmd, env = flite_command(root)
        with mp.get_context("spawn").Pool(args.workers, _init, (cmd, env)) as pool:
            total = refused = 0
            for folder in args.tokens:
                for tokens in sorted(Path(folder).glob("tokens-*.npz")):
                    name = tokens.name.replace("tokens-", "phones-", 1)
                    target = (Path(args.out) if args.out else tokens.parent) / name
                    if target.exists() and args.limit is None:
                        print(f"{target} exists: kept", flush=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    out = None if args.limit is not None else target
                    r = backfill_file(tokens, out, config, pool, args.limit)
                    total += r.utterances
                    refused += r.refused
                    print(
                        f"{tokens}: {r.utterances} utterances in {r.seconds:.0f} s "
                        f"({r.utterances / max(r.seconds, 1e-9):.1f}/s), frame count equal "
                        f"{r.exact}, within one {r.utterances - r.refused}, refused {r.refused}"
                        + (f" → {target}" if out else " (measured only)"),
                        flush=True,
                    )
    print(f"backfill: {total} utterances, {refused} refused", flush=True)
    if total and refused == total:
        raise SystemExit("every utterance was refused: is this the teacher's Flite (--debs)?")


if __name__ == "__main__":
    main()
