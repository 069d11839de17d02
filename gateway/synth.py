"""`voxgate synth`: offline synthesis of one text to a WAV file through the real engine."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import wave
from pathlib import Path

import numpy as np


def add_synth_parser(subparsers) -> None:
    p = subparsers.add_parser("synth", help="synthesize text to a WAV file (offline)")
    p.add_argument("--model", default=None, help="preset name, checkpoint folder or HF repo id")
    p.add_argument("--codec", default=None, help="codec repo id or folder (default: the model's)")
    p.add_argument("--text", required=True, help="what to say")
    p.add_argument("--out", required=True, type=Path, help="output .wav path")
    p.add_argument("--voice", default=None)
    p.add_argument("--temperature", type=float, default=None, help="(default: the model's)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=1200)
    p.add_argument("--min-tokens", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if present)")
    p.add_argument(
        "--cpu-int8",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="int8 weights on the CPU (voxgate-tiny: about twice as fast, its default on the "
        "CPU; see docs/models.md)",
    )
    p.add_argument(
        "--random-weights", action="store_true", help="real config, random weights (presets)"
    )
    p.set_defaults(func=run_synth)


def write_wav(path: Path, pcm: np.ndarray, sample_rate: int) -> None:
    clipped = np.clip(pcm, -1.0, 1.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes((clipped * 32767.0).astype("<i2").tobytes())


async def _synthesize(engine, text: str, voice, sampling) -> tuple[np.ndarray, object]:
    from engine.outputs import AudioChunk, SpeechRequest

    stream = await engine.submit(SpeechRequest(text=text, voice=voice, sampling=sampling))
    pieces: list[np.ndarray] = []
    finished = None
    async for event in stream:
        if isinstance(event, AudioChunk):
            pieces.append(event.pcm)
        else:
            finished = event
    await engine.shutdown()
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return audio, finished


def run_synth(args: argparse.Namespace) -> int:
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from engine.request import SamplingParams
    from models.registry import DEFAULT_MODEL

    start = time.monotonic()
    engine = build_engine(
        args.model or DEFAULT_MODEL,
        args.codec,
        EngineConfig(device=args.device, cpu_int8=args.cpu_int8),
        progress=True,
        random_weights=args.random_weights,
    )
    # The model's tuned sampling (as the gateway uses), with what the command line sets on top.
    given = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "min_tokens": args.min_tokens,
    }
    sampling = SamplingParams(
        **{**engine.facts.sampling_defaults, **{k: v for k, v in given.items() if v is not None}}
    )
    audio, finished = asyncio.run(_synthesize(engine, args.text, args.voice, sampling))
    if finished is None or finished.reason.value == "failed":
        print(
            f"error: synthesis failed: {getattr(finished, 'error', 'no result')}", file=sys.stderr
        )
        return 1
    write_wav(args.out, audio, engine.facts.sample_rate)
    seconds = len(audio) / engine.facts.sample_rate
    print(
        f"wrote {args.out} ({seconds:.2f} s of audio at {engine.facts.sample_rate} Hz, "
        f"{finished.num_tokens} tokens, finish={finished.reason.value}, "
        f"{time.monotonic() - start:.1f} s wall)"
    )
    return 0
