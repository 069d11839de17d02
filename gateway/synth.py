"""`voxgate synth`: offline synthesis of one text to a WAV file through the real engine.

The text is cut into sentence segments by the gateway's own rules (gateway/segmenter.py,
GatewaySettings' segment lengths), each one engine request with its share of the token budget,
all submitted at once so that the engine batches them (one after another with --seed, so that
the output repeats), and their audio joined in order: a
paragraph is said as the WebSocket gateway would say it (a model trained on single sentences,
as voxgate-tiny is, reads each one best alone). `--speed` time-stretches the joined audio,
pitch unchanged, as the gateway does a reply's (gateway/time_stretch.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import wave
from pathlib import Path

import numpy as np


def add_synth_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "synth",
        help="synthesize text to a WAV file (offline)",
        description="Synthesize text to a WAV file, offline, through the same engine as "
        "`voxgate serve` (sentence by sentence, as the gateway says a reply).",
    )
    p.add_argument("--text", required=True, help="what to say")
    p.add_argument("--out", required=True, type=Path, help="output .wav path")
    p.add_argument(
        "--model",
        default=None,
        help="preset name (README's Models table), checkpoint folder or HF repo id "
        "(default: voxgate-tiny)",
    )
    p.add_argument("--codec", default=None, help="codec repo id or folder (default: the model's)")
    p.add_argument(
        "--voice",
        default=None,
        metavar="NAME",
        help="one of the model's voices (default: the model's; voxgate serve lists them at "
        "GET /v1/voices)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="X",
        help="sampling temperature, 0 for greedy (default: the model's)",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="playback speed, 0.25 to 4.0, pitch unchanged (as /v1/audio/speech's `speed`; "
        "default 1)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="repeatable output (to a rounding bit of the audio): with a seed the sentences "
        "are synthesized one after another "
        "(batched together, their numerics would depend on when each joined the batch)",
    )
    p.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one of the model's per-request options (repeatable; Chatterbox: "
        "exaggeration=0.8, cfg_weight=0.3; Qwen3-TTS: language=english, "
        "'instruction=Speak slowly.'; Zonos: language=de, pitch_std=60; default: the model's)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=1200,
        metavar="N",
        help="speech tokens for the whole text at most, shared among its sentences (default 1200)",
    )
    p.add_argument(
        "--min-tokens",
        type=int,
        default=0,
        metavar="N",
        help="speech tokens at least, for models whose stop never comes (default 0)",
    )
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


def at_speed(audio: np.ndarray, speed: float, sample_rate: int) -> np.ndarray:
    """`audio` time-stretched to `speed`, pitch unchanged: round(len / speed) samples."""
    from gateway.time_stretch import TimeStretcher

    if speed == 1.0:
        return audio
    stretcher = TimeStretcher(speed, sample_rate)
    return np.concatenate([stretcher.push(audio), stretcher.flush()])


def sentence_segments(text: str) -> list[str]:
    """`text` cut as the gateway cuts a response's text (gateway/segmenter.py)."""
    from gateway.config import GatewaySettings
    from gateway.segmenter import SentenceSegmenter

    settings = GatewaySettings()
    segmenter = SentenceSegmenter(settings.min_segment_chars, settings.max_segment_chars)
    return segmenter.push(text) + segmenter.finish()


def parse_model_options(given: list[str]) -> dict[str, str]:
    """`--model-option NAME=VALUE` values → name → the value as written (ValueError for a
    malformed one); typed_model_options reads each as its option's kind."""
    options = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(
                f"--model-option {item!r}: give NAME=NUMBER or NAME=TEXT, e.g. "
                "exaggeration=0.8 or language=english"
            )
        options[name.strip()] = value
    return options


def typed_model_options(raw: dict[str, str], specs: tuple) -> dict[str, float | str]:
    """`raw` (parse_model_options) with a number option's value read as a number and a text
    option's kept as written; a name the model does not take stays as it is, for
    resolve_request_options to refuse by name."""
    kinds = {spec.name: spec.kind for spec in specs}
    typed: dict[str, float | str] = {}
    for name, value in raw.items():
        if kinds.get(name) == "number":
            try:
                typed[name] = float(value)
            except ValueError:
                raise ValueError(
                    f"--model-option {name}={value}: {name} is a number, e.g. {name}=0.5"
                ) from None
        else:
            typed[name] = value
    return typed


async def _synthesize(
    engine,
    texts: list[str],
    voice,
    samplings: list,
    together: bool = True,
    model_options: dict[str, float | str] | None = None,
) -> tuple[np.ndarray, list]:
    """Every segment at once (`together`: the engine batches them) or one after another;
    audio joined in order, and each segment's Finished (None if its stream ended without
    one)."""
    from engine.api import AudioChunk, SpeechRequest

    async def one(text: str, sampling) -> tuple[list[np.ndarray], object]:
        request = SpeechRequest(text, voice, sampling, model_options=model_options or {})
        stream = await engine.submit(request)
        pieces: list[np.ndarray] = []
        finished = None
        async for event in stream:
            if isinstance(event, AudioChunk):
                pieces.append(event.pcm)
            else:
                finished = event
        return pieces, finished

    try:
        pairs = list(zip(texts, samplings, strict=True))
        if together:
            results = await asyncio.gather(*(one(t, s) for t, s in pairs))
        else:
            results = [await one(t, s) for t, s in pairs]
    finally:
        await engine.shutdown()
    pieces = [p for segment, _ in results for p in segment]
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return audio, [finished for _, finished in results]


def run_synth(args: argparse.Namespace) -> int:
    from engine.api import ConfigError, SamplingParams, resolve_request_options
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.response import length_shares, share_tokens
    from gateway.speech_options import (
        OptionRefused,
        check_voice,
        checked_model_options,
        checked_sampling,
    )
    from gateway.time_stretch import check_speed
    from models.families import known_family
    from models.registry import DEFAULT_MODEL
    from models.request_options import option_specs

    segments = sentence_segments(args.text)
    if not segments:
        print("error: --text has nothing to say", file=sys.stderr)
        return 2
    speed = check_speed(args.speed, "--speed")  # before any load, as every check here
    raw_options = parse_model_options(args.model_option)
    model = args.model or DEFAULT_MODEL
    family = known_family(model)  # a preset or a local folder: checked before any load
    if family is not None:
        declared = option_specs(family.request_options)
        resolve_request_options(declared, typed_model_options(raw_options, declared), model)
    # The model's tuned sampling (as the gateway uses), with what the command line sets on top:
    # each value's range checked now, the model's context once it is loaded.
    given = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "min_tokens": args.min_tokens,
    }
    given = {k: v for k, v in given.items() if v is not None}
    try:
        SamplingParams(**given)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    start = time.monotonic()
    engine = build_engine(
        model,
        args.codec,
        # Offline: no listener to keep up with, so no stream is refused for real time.
        EngineConfig(device=args.device, cpu_int8=args.cpu_int8, realtime_admission=False),
        progress=True,
        random_weights=args.random_weights,
    )
    facts = engine.facts
    try:  # checked as the gateway's endpoints check them (gateway/speech_options.py)
        check_voice(args.voice, facts)
        sampling = checked_sampling(given, facts)
        model_options = checked_model_options(
            typed_model_options(raw_options, facts.request_options), facts
        )
    except (OptionRefused, ValueError) as exc:  # said in one line; the engine is not needed
        asyncio.run(engine.shutdown())
        raise ValueError(exc.message if isinstance(exc, OptionRefused) else str(exc)) from None
    # max/min_tokens are the whole text's, shared out by length as the gateway shares them.
    samplings = [share_tokens(sampling, share) for share in length_shares(segments)]
    audio, finished = asyncio.run(
        _synthesize(engine, segments, args.voice, samplings, args.seed is None, model_options)
    )
    failed = [f for f in finished if f is None or f.reason.value == "failed"]
    if failed:
        print(
            f"error: synthesis failed: {getattr(failed[0], 'error', None) or 'no result'}",
            file=sys.stderr,
        )
        return 1
    audio = at_speed(audio, speed, engine.facts.sample_rate)
    write_wav(args.out, audio, engine.facts.sample_rate)
    seconds = len(audio) / engine.facts.sample_rate
    reasons = sorted({f.reason.value for f in finished})
    at = f" at speed {speed:g}" if speed != 1.0 else ""
    print(
        f"wrote {args.out} ({seconds:.2f} s of audio{at} at {engine.facts.sample_rate} Hz, "
        f"{len(segments)} sentence segment(s), {sum(f.num_tokens for f in finished)} tokens, "
        f"finish={'/'.join(reasons)}, {time.monotonic() - start:.1f} s wall)"
    )
    return 0
