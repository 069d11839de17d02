"""The TTS workload (bench/tts_workload.jsonl) and open-loop request plans.

A plan is deterministic in (seed, rate): the system under test and the baseline see the same
sentences at the same offsets at every rate they share.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

# 7 SNAC codes per frame × 24000 / 2048 frames per second (Orpheus, tiny-orpheus). The bench
# takes the served model's rate from session.started (token_rate_hz) unless told (`--token-rate`).
ORPHEUS_TOKEN_RATE = 7 * 24000 / 2048
# The workload lives beside the other benchmark data in the checkout's bench/ folder, which an
# install does not carry: an installed `voxgate bench` is given one with `--workload`.
DEFAULT_WORKLOAD = Path(__file__).resolve().parents[1] / "bench" / "tts_workload.jsonl"


@dataclass(frozen=True)
class WorkItem:
    id: str
    text: str
    audio_seconds: float


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    item: WorkItem
    tokens: int  # min_tokens = max_tokens
    offset_s: float  # when the final text is sent, from the start of the point


def load_workload(path: Path | str, max_audio_seconds: float | None = None) -> list[WorkItem]:
    """Read the JSONL workload; `max_audio_seconds` caps each item's length (smoke tests)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"workload {path} not found: pass --workload FILE, a JSONL of id, text and "
            "audio_seconds rows (a Voxgate checkout has one in bench/tts_workload.jsonl)"
        )
    items = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            seconds = float(row["audio_seconds"])
            items.append(WorkItem(str(row["id"]), str(row["text"]), seconds))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{path}:{n}: not a workload row (id, text, audio_seconds): {exc}"
            ) from None
    if not items:
        raise ValueError(f"workload {path} is empty")
    if max_audio_seconds is not None:
        items = [WorkItem(i.id, i.text, min(i.audio_seconds, max_audio_seconds)) for i in items]
    return items


def tokens_for(audio_seconds: float, token_rate: float) -> int:
    """min_tokens = max_tokens for a request that should produce `audio_seconds` of speech."""
    return max(1, round(audio_seconds * token_rate))


def poisson_plan(
    items: list[WorkItem],
    rate: float,
    duration_s: float,
    min_requests: int,
    token_rate: float,
    seed: int = 0,
) -> list[PlannedRequest]:
    """Open-loop Poisson arrivals at `rate` req/s, for `duration_s` seconds or `min_requests`
    requests, whichever is longer. Items are drawn without replacement (cycling if needed)."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    rng = random.Random(f"{seed}/{rate:.6g}")
    order = list(range(len(items)))
    rng.shuffle(order)
    plan: list[PlannedRequest] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s and len(plan) >= min_requests:
            return plan
        item = items[order[len(plan) % len(order)]]
        plan.append(PlannedRequest(len(plan), item, tokens_for(item.audio_seconds, token_rate), t))


def burst_plan(
    items: list[WorkItem], count: int, token_rate: float, seed: int = 0
) -> list[PlannedRequest]:
    """`count` requests all at offset 0 (throughput mode, warm-up)."""
    rng = random.Random(f"{seed}/burst")
    order = list(range(len(items)))
    rng.shuffle(order)
    return [
        PlannedRequest(i, it, tokens_for(it.audio_seconds, token_rate), 0.0)
        for i, it in enumerate(items[order[i % len(order)]] for i in range(count))
    ]


def staggered_plan(
    items: list[WorkItem],
    count: int,
    stagger_s: float,
    audio_seconds: float,
    token_rate: float,
    seed: int = 0,
) -> list[PlannedRequest]:
    """`count` listeners starting evenly over `stagger_s` seconds, each asking for
    `audio_seconds` of audio (the capacity mode: how many real-time streams hold at once)."""
    if count < 1 or stagger_s < 0 or audio_seconds <= 0:
        raise ValueError("count must be >= 1, stagger_s >= 0 and audio_seconds > 0")
    rng = random.Random(f"{seed}/staggered")
    order = list(range(len(items)))
    rng.shuffle(order)
    tokens = tokens_for(audio_seconds, token_rate)
    plan = []
    for i in range(count):
        item = items[order[i % len(order)]]
        listener = WorkItem(item.id, item.text, audio_seconds)
        plan.append(PlannedRequest(i, listener, tokens, i * stagger_s / count))
    return plan
