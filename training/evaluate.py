"""Stage 4: the held-out evaluation. Word error rate (Whisper tiny.en, training/judge.py) on
held-out everyday sentences (training/sentences.py: never in any training set) for

- the teacher (Flite slt, the audio the model learned from),
- the codec alone (teacher audio → VoxCodec encode → decode),
- the model through the real engine (batched requests, its tuned sampling, fixed seeds),

plus the model's real-time factor on this machine for that batch.

    python -m training.evaluate --model voxgate-tiny [--count 50] [--debs .teacher] [--out eval.json]

A phone-reading checkpoint ("voxgate-phones") says its words with the serving G2P
(models/voxgate_tiny/g2p.py), or with `--lexicon FILE` (the training lexicon) where that G2P is
not installed; sentences it cannot say are left out of every system's score, and counted.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from training.judge import WhisperJudge, word_error_rate
from training.sentences import heldout_sentences


def teacher_audio(texts: list[str], debs: str | None) -> list[np.ndarray]:
    from models.voxgate_tiny.text import normalize
    from training.teacher import flite_command, synthesize, trim_silence, unpack_debs

    with tempfile.TemporaryDirectory() as tmp:
        root = unpack_debs(Path(debs), Path(tmp) / "root") if debs else None
        cmd, env = flite_command(root)
        return [
            trim_silence(synthesize(cmd, env, normalize(t), Path(tmp)).audio).astype(np.float32)
            / 32768
            for t in texts
        ]


@torch.no_grad()
def codec_resynthesis(codec, audio_16k: list[np.ndarray]) -> list[np.ndarray]:
    from training.common import resample

    out = []
    hop = codec.config.hop_length
    for pcm in audio_16k:
        wave = resample(torch.from_numpy(pcm), 16000, codec.config.sample_rate)
        wave = torch.nn.functional.pad(wave, (0, -len(wave) % hop))[None]
        param = next(codec.parameters())
        audio, _ = codec.decode(codec.encode(wave.to(param.device, param.dtype)))
        out.append(audio[0].float().cpu().numpy())
    return out


def model_audio(model, texts: list[str], max_num_seqs: int) -> tuple[list[np.ndarray], float]:
    """Every sentence through the engine, batched; returns audio and wall seconds."""
    from engine.config import EngineConfig
    from engine.core import EngineCore, EngineOverloaded
    from engine.outputs import AudioChunk, SpeechRequest
    from engine.request import SamplingParams

    core = EngineCore(model, EngineConfig(max_num_seqs=max_num_seqs), torch.device("cpu"), "sdpa")
    defaults = model.facts.sampling_defaults
    start = time.monotonic()
    waiting = list(enumerate(texts))  # added as the KV cache has room, in order
    ids: list[str] = []
    pieces: dict[str, list[np.ndarray]] = {}
    while waiting or core.has_work():
        while waiting:
            i, text = waiting[0]
            params = SamplingParams(**{**defaults, "seed": i, "max_tokens": 1000})
            try:
                request_id = core.add_request(SpeechRequest(text, None, params)).request_id
            except EngineOverloaded:
                if not core.has_work():  # an empty engine that refuses will never take it
                    raise
                break
            waiting.pop(0)
            ids.append(request_id)
            pieces[request_id] = []
        for event in core.step():
            if isinstance(event, AudioChunk):
                pieces[event.request_id].append(event.pcm)
    wall = time.monotonic() - start
    return [np.concatenate(pieces[i]) if pieces[i] else np.zeros(0, np.float32) for i in ids], wall


def sayable(model, texts: list[str], lexicon: str | None) -> list[str]:
    """The sentences a phone-reading model can turn into its phones (all, for a character model),
    with the training lexicon in place of the G2P when `lexicon` is given."""
    from models.voxgate_tiny.phone_text import PhoneTokenizer
    from models.voxgate_tiny.text import normalize

    tokenizer = getattr(model, "tokenizer", None)
    if not isinstance(tokenizer, PhoneTokenizer):
        return texts
    if lexicon:
        from models.voxgate_tiny.g2p import read_lexicon

        words = read_lexicon(Path(lexicon))
        model.tokenizer = PhoneTokenizer(tokenizer.symbols, word_phones=words.__getitem__)
    kept = []
    for text in texts:
        try:
            model.tokenizer.encode(normalize(text))
            kept.append(text)
        except (KeyError, ValueError):
            continue
    if len(kept) < len(texts):
        print(f"phones: {len(texts) - len(kept)} of {len(texts)} sentences left out (unsayable)")
    return kept


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="voxgate-tiny", help="preset or checkpoint folder")
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--debs", help="teacher .deb folder (default: system flite)")
    p.add_argument("--out", help="write per-sentence results as JSON here")
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lexicon", help="phone checkpoints: say words with this lexicon, not the G2P")
    p.add_argument(
        "--model-only",
        action="store_true",
        help="judge the model alone (comparing checkpoints: the teacher's and the codec's WER "
        "do not change between them), e.g. on --count 200 to narrow the spread of 50",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from models.registry import load_model

    texts = heldout_sentences(args.count)
    judge = WhisperJudge(args.threads)
    model = load_model(args.model)
    texts = sayable(model, texts, args.lexicon)
    systems: dict[str, tuple[list[np.ndarray], int]] = {}
    if not args.model_only:
        teacher = teacher_audio(texts, args.debs)
        systems["teacher (flite slt)"] = (teacher, 16000)
        codec = getattr(getattr(model, "detok", None), "codec", None)
        if codec is not None:
            resynthesised = codec_resynthesis(codec, teacher)
            systems["codec resynthesis"] = (resynthesised, codec.config.sample_rate)
    audio, wall = model_audio(model, texts, args.max_num_seqs)
    systems[f"model ({model.facts.name})"] = (audio, model.facts.sample_rate)

    report: dict = {"sentences": texts, "systems": {}}
    for name, (clips, rate) in systems.items():
        hyps = [judge.transcribe(c, rate) for c in clips]
        seconds = sum(len(c) for c in clips) / rate
        report["systems"][name] = {
            "wer": word_error_rate(texts, hyps),
            "audio_s": seconds,
            "transcripts": hyps,
        }
    model_s = report["systems"][f"model ({model.facts.name})"]["audio_s"]
    report["model_rtf"] = {"wall_s": wall, "audio_s": model_s, "streams": args.max_num_seqs}
    print(f"held-out sentences: {len(texts)}")
    print("| system | WER | audio |\n| --- | --- | --- |")
    for name, r in report["systems"].items():
        print(f"| {name} | {100 * r['wer']:.1f} % | {r['audio_s']:.0f} s |")
    print(
        f"model: {model_s:.0f} s of audio in {wall:.0f} s wall, up to {args.max_num_seqs} "
        f"concurrent requests ({model_s / max(wall, 1e-9):.2f}× real time in total)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
