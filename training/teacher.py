"""Stage 1: synthesize the training speech with the teacher voice, Flite's cmu_us_slt (CMU ARCTIC
"slt", BSD-style licence: see training/README.md), in parallel worker processes.

The teacher comes as Debian packages unpacked with `dpkg -x` (no install, no root), so the same
command runs on a machine without a package registry: `--debs DIR` holds flite, libflite1,
libasound2(+data) and wamerican (the word list), fetched with `make teacher-debs`. Without
`--debs`, `flite` and /usr/share/dict/words are taken from the system.

Output: `OUT/shard-NN.npz`, one per worker: `audio` (int16, 16 kHz, utterances back to back),
`offsets`/`lengths` (samples) and `texts` (the normalised text each utterance says), and the
phones the teacher synthesised (the same Flite call prints them with `-psdur`):
  phones       JSON list per utterance of Flite phone names (training/phones.py's inventory)
  phone_ends   float32 [all phones]: each phone's end in seconds from the start of the UNTRIMMED
               audio Flite wrote, utterances back to back (phone_counts says where each starts)
  phone_counts int64 [utterances]
  trim_starts  int64 [utterances]: samples trim_silence cut from the front; a phone's end in the
               stored audio is phone_end - trim_start / 16000 (TeacherCorpus.load shifts them)
Shards written before the phones existed have none of these four; they still load (no phones).

    python -m training.teacher --debs .teacher --out /tmp/vox/teacher --hours 8.5 --workers 16
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.voxgate_tiny.text import normalize
from training.phones import parse_psdur
from training.sentences import read_wordlist, training_sentences

TEACHER_RATE = 16000
VOICE = "slt"
MEAN_SECONDS = 2.7  # measured mean utterance length of the generated sentences after trimming
# Flite's last phone end vs the samples it wrote: measured within 5 ms; more means the phones
# no longer describe this audio.
PHONE_END_TOLERANCE_S = 0.03


def unpack_debs(debs: Path, root: Path) -> Path:
    """dpkg -x every .deb in `debs` into `root` (a .deb is an ar archive holding
    data.tar.*; without dpkg, Python unpacks that); returns root."""
    files = sorted(debs.glob("*.deb"))
    if not files:
        raise SystemExit(f"no .deb files in {debs}: run `make teacher-debs` first")
    root.mkdir(parents=True, exist_ok=True)
    for deb in files:
        if shutil.which("dpkg"):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
        else:
            _extract_deb_data(deb, root)
    return root


def _extract_deb_data(deb: Path, root: Path) -> None:
    import io
    import tarfile

    blob = deb.read_bytes()
    pos = 8  # after "!<arch>\n"
    while pos < len(blob):
        name, size = (
            blob[pos : pos + 16].decode().strip().rstrip("/"),
            int(blob[pos + 48 : pos + 58]),
        )
        body = blob[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(root, filter="tar")
            return
        pos += 60 + size + (size % 2)
    raise SystemExit(f"{deb} holds no data.tar member")


def flite_command(root: Path | None) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if root is None:
        exe = shutil.which("flite")
        if exe is None:
            raise SystemExit("flite is not installed: pass --debs DIR (see `make teacher-debs`)")
        return [exe], env
    libs = [str(p) for p in root.glob("usr/lib/*-linux-gnu")]
    env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    return [str(root / "usr/bin/flite")], env


def trim_bounds(audio: np.ndarray, rate: int = TEACHER_RATE) -> tuple[int, int]:
    """(start, end) samples that keep 50 ms before the first and 150 ms after the last 10 ms
    window louder than 2% of the peak; (0, 0) for silence."""
    win = rate // 100
    n = len(audio) // win
    if n == 0:
        return 0, len(audio)
    energy = np.abs(audio[: n * win].astype(np.float32)).reshape(n, win).max(axis=1)
    loud = np.flatnonzero(energy > 0.02 * max(energy.max(), 1.0))
    if not len(loud):
        return 0, 0
    start = max(0, loud[0] * win - rate // 20)
    end = min(len(audio), (loud[-1] + 1) * win + rate * 3 // 20)
    return int(start), int(end)


def trim_silence(audio: np.ndarray, rate: int = TEACHER_RATE) -> np.ndarray:
    """Cut leading/trailing silence (trim_bounds): shorter sequences, same speech."""
    start, end = trim_bounds(audio, rate)
    return audio[start:end]


@dataclass
class Synthesis:
    audio: np.ndarray  # int16 [samples] at TEACHER_RATE, untrimmed
    phones: list[str]  # Flite phone names, in order
    phone_ends: np.ndarray  # float64 [phones] end of each phone, seconds from audio[0]


def synthesize(cmd: list[str], env: dict[str, str], text: str, tmp: Path) -> Synthesis:
    """One Flite call writes the audio and prints (-psdur) the phones of that very audio."""
    path = tmp / "out.wav"
    run = subprocess.run(
        [*cmd, "-voice", VOICE, "-t", text, "-psdur", "-o", str(path)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    with wave.open(str(path)) as w:
        if w.getframerate() != TEACHER_RATE or w.getsampwidth() != 2:
            raise RuntimeError(f"flite wrote {w.getframerate()} Hz / {w.getsampwidth()} bytes")
        audio = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    phones, ends = parse_psdur(run.stdout)
    seconds = len(audio) / TEACHER_RATE
    if not phones or abs(ends[-1] - seconds) > PHONE_END_TOLERANCE_S:
        last = f"{ends[-1]:.3f} s" if phones else "no phones"
        raise RuntimeError(
            f"flite's phones end at {last} but its audio lasts {seconds:.3f} s for {text!r}: "
            "is this a flite whose -psdur prints something else?"
        )
    return Synthesis(audio, phones, ends)


def _worker(
    args: tuple[int, list[str], list[str], dict[str, str], str, float],
) -> tuple[int, float]:
    index, texts, cmd, env, out, budget_s = args
    audio, offsets, lengths, kept = [], [], [], []
    phones, phone_ends, trim_starts = [], [], []
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for text in texts:
            said = normalize(text)
            if not said:
                continue
            spoken = synthesize(cmd, env, said, Path(tmp))
            start, end = trim_bounds(spoken.audio)
            pcm = spoken.audio[start:end]
            if len(pcm) < TEACHER_RATE // 4:
                continue
            phones.append(spoken.phones)
            phone_ends.append(spoken.phone_ends)
            trim_starts.append(start)
            offsets.append(total)
            lengths.append(len(pcm))
            audio.append(pcm)
            kept.append(said)
            total += len(pcm)
            if total >= budget_s * TEACHER_RATE:
                break
    np.savez(
        Path(out) / f"shard-{index:02d}.npz",
        audio=np.concatenate(audio) if audio else np.zeros(0, np.int16),
        offsets=np.array(offsets, np.int64),
        lengths=np.array(lengths, np.int64),
        texts=np.array(json.dumps(kept)),
        phones=np.array(json.dumps(phones)),
        phone_ends=(np.concatenate(phone_ends) if phone_ends else np.zeros(0)).astype(np.float32),
        phone_counts=np.array([len(p) for p in phones], np.int64),
        trim_starts=np.array(trim_starts, np.int64),
    )
    return len(kept), total / TEACHER_RATE


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="folder for shard-NN.npz")
    p.add_argument("--hours", type=float, default=8.5)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--debs", help="folder of teacher .deb files (unpacked with dpkg -x)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--word-share", type=float, default=0.25, help="share of word-list sentences")
    args = p.parse_args(argv)

    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = unpack_debs(Path(args.debs), out.parent / "teacher-root") if args.debs else None
    cmd, env = flite_command(root)
    dict_path = (root / "usr/share/dict/words") if root else Path("/usr/share/dict/words")
    words = read_wordlist(str(dict_path)) if dict_path.exists() else None
    # 30% more sentences than the mean length suggests; each worker stops at its share of hours.
    count = int(args.hours * 3600 / MEAN_SECONDS * 1.3) + args.workers
    texts = training_sentences(count, seed=args.seed, words=words, word_share=args.word_share)
    budget = args.hours * 3600 / args.workers
    jobs = [(i, texts[i :: args.workers], cmd, env, str(out), budget) for i in range(args.workers)]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_worker, jobs)
    utterances = sum(n for n, _ in results)
    hours = sum(s for _, s in results) / 3600
    print(
        f"teacher: {utterances} utterances, {hours:.2f} h of speech in {time.time() - t0:.0f} s "
        f"({len(words) if words else 0} dictionary words available)",
        flush=True,
    )


if __name__ == "__main__":
    main()
