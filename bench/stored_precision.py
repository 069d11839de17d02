"""Would voxgate-tiny's shipped weights lose anything stored in another precision?

    python bench/stored_precision.py [--model FOLDER] [--greedy 20] [--wer 200] [--as fp16,int8]

The weights are read as shipped (the loader upcasts them to float32 on the CPU), then rounded
in memory as they would be stored: `fp16` (every tensor through float16) or `int8` (the
SpeechLM's Linear weights through symmetric int8 with one scale per output row; embeddings,
norms and the codec as shipped). Each candidate generates through the real engine on held-out
sentences (training/sentences.py) and is compared with the shipped weights:

- greedy (temperature 0) on `--greedy` sentences: how many token sequences are identical, the
  first row where each differs, and the largest audio difference where lengths agree;
- with `--wer N`: the word error rate of training.evaluate's judge (Whisper tiny.en) on N
  sentences, the tuned sampling with seeds 0…N-1 for both, and per sentence whether the
  candidate made more or fewer word errors (a paired comparison; N = 200 spreads ±2–3 points).

Prints one JSON object per result line; nothing is written to the weights folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, SpeechRequest
from engine.request import SamplingParams
from models.voxgate_tiny.loading import SHIPPED_WEIGHTS, load_voxgate_tiny
from models.voxgate_tiny.model import VoxgateTinyModel

ROUNDINGS = ("fp16", "int8")


def stored_as(model: VoxgateTinyModel, kind: str) -> VoxgateTinyModel:
    """The model with its weights rounded as `kind` would store them (in place)."""
    with torch.no_grad():
        if kind == "fp16":
            for module in (model.lm, model.detok.codec):
                for p in module.parameters():
                    p.copy_(p.to(torch.float16).to(p.dtype))
        elif kind == "int8":
            for name, p in model.lm.named_parameters():
                if p.dim() == 2 and "embed" not in name:
                    scale = p.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
                    p.copy_((p / scale).round().clamp(-127, 127) * scale)
        else:
            raise SystemExit(f"unknown precision {kind!r}: choose from {', '.join(ROUNDINGS)}")
    return model


def greedy(model: VoxgateTinyModel, texts: list[str]) -> tuple[list[tuple], list[np.ndarray]]:
    """Each text's generated rows and audio at temperature 0, 8 requests at a time."""
    core = EngineCore(model, EngineConfig(max_num_seqs=8), torch.device("cpu"), "sdpa")
    rows: dict[str, tuple] = {}
    audio: dict[str, list[np.ndarray]] = {}
    order: list[str] = []
    waiting = list(texts)
    while waiting or core.has_work():
        while waiting and len(order) - len(rows) < 8:
            params = SamplingParams(temperature=0.0, max_tokens=1000)
            request_id = core.add_request(SpeechRequest(waiting.pop(0), None, params)).request_id
            order.append(request_id)
            audio[request_id] = []
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio[event.request_id].append(event.pcm)
            elif isinstance(event, Finished):
                rows[event.request_id] = event.output_ids
    return [rows[r] for r in order], [np.concatenate(audio[r]) for r in order]


def first_difference(a: tuple, b: tuple) -> int | None:
    """The first row where two generations differ (the shorter one's length when one is the
    other's start), None when they are identical."""
    if a == b:
        return None
    pairs = zip(a, b, strict=False)  # lengths may differ: compare the common part
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


def compare_greedy(folder: Path, kinds: list[str], count: int) -> None:
    from training.sentences import heldout_sentences

    texts = heldout_sentences(count)
    load = lambda: load_voxgate_tiny(folder, torch.device("cpu"), torch.float32)  # noqa: E731
    ref_rows, ref_audio = greedy(load(), texts)
    for kind in kinds:
        rows, audio = greedy(stored_as(load(), kind), texts)
        first = [first_difference(a, b) for a, b in zip(ref_rows, rows, strict=True)]
        same_length = [(x, y) for x, y in zip(ref_audio, audio, strict=True) if len(x) == len(y)]
        diff = max((float(np.abs(x - y).max()) for x, y in same_length), default=None)
        identical = sum(a == b for a, b in zip(ref_rows, rows, strict=True))
        print(
            json.dumps(
                {
                    "greedy": kind,
                    "sentences": count,
                    "identical": identical,
                    "first_differing_row": first,
                    "max_audio_diff_same_length": diff,
                }
            ),
            flush=True,
        )


def compare_wer(folder: Path, kinds: list[str], count: int) -> None:
    from training.evaluate import model_audio, sayable
    from training.judge import WhisperJudge, edit_distance, word_error_rate, words
    from training.sentences import heldout_sentences

    judge = WhisperJudge(1)
    errors: dict[str, list[int]] = {}
    for kind in ["shipped", *kinds]:
        start = time.monotonic()
        model = load_voxgate_tiny(folder, torch.device("cpu"), torch.float32)
        if kind != "shipped":
            stored_as(model, kind)
        texts = sayable(model, heldout_sentences(count), None)
        clips, _ = model_audio(model, texts, 8)
        hyps = [judge.transcribe(c, model.facts.sample_rate) for c in clips]
        errors[kind] = [edit_distance(words(t), words(h)) for t, h in zip(texts, hyps, strict=True)]
        result = {"wer": kind, "sentences": len(texts), "value": word_error_rate(texts, hyps)}
        if kind != "shipped":
            pairs = list(zip(errors["shipped"], errors[kind], strict=True))
            result["worse"] = sum(a < b for a, b in pairs)
            result["better"] = sum(a > b for a, b in pairs)
        result["seconds"] = round(time.monotonic() - start)
        print(json.dumps(result), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default=str(SHIPPED_WEIGHTS), help="a voxgate-tiny folder")
    p.add_argument("--greedy", type=int, default=20, help="sentences for the greedy check")
    p.add_argument("--wer", type=int, default=0, help="sentences for the WER check (0: none)")
    p.add_argument("--as", dest="kinds", default="fp16,int8", help="precisions to compare")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in ROUNDINGS:
            raise SystemExit(f"unknown precision {kind!r}: choose from {', '.join(ROUNDINGS)}")
    if args.greedy:
        compare_greedy(Path(args.model), kinds, args.greedy)
    if args.wer:
        compare_wer(Path(args.model), kinds, args.wer)


if __name__ == "__main__":
    main()
