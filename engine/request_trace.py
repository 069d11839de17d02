"""Per-request timelines, written as one JSON line per finished request when
`EngineConfig.trace_path` is set (`voxgate serve --trace-requests FILE`; `voxgate bench --serve`
turns it on and summarises each rate point with `summarize`).

Why: the bench sees a stream from the outside (time to first audio, gaps), not where the time
went. A request's time to first audio is its wait for a first token (queue and prefill), the
steps until its first chunk has its tokens, the time the chunk is held (the first-chunk rule
building cover, or both codec workers busy), the wait for its job to start and the job itself. A gap is a chunk that came
out after the listener's buffer ran dry. Each of those is a different fix.

A request refused at submit is written too, as a line of its own (`"refused"`: when, why, and
where the streams' outlook refused it, what the outlook read: engine/realtime_outlook.py), so a
run's refusals can be judged again offline (bench/replay_refusals.py).

So is every decode turn real-time admission measures, after the warm-up (`"turns"` lines of
[time, rows, KV pages read, seconds], up to `TURNS_PER_LINE` a line, written before each
request's timeline), with one `"turn_model"` line
first: the warm-up's burst figures, its page price and whether the bursts bound the slope. With
them the turn cost model can be replayed offline over the very turns it saw, and its
predictions set against the turns that followed (bench/turn_replay.py).

Times are the engine's clock (time.monotonic, the same clock across the machine's processes):
`arrival` is absolute, every other time is milliseconds after it. Plain data, no torch: the
scheduler and core fill it in; nothing here changes what they decide.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from engine.realtime_outlook import OutlookInputs

TURNS_PER_LINE = 256  # decode turns a "turns" line carries


@dataclass
class ChunkTrace:
    """One codec job's part of a request: its new tokens and when they went through."""

    tokens: int  # new tokens this job decoded for the request
    submitted_ms: float  # the job left the engine thread
    lane: bool  # the first-chunk lane's job (else the steady one)
    rows: int  # requests in the job
    started_ms: float | None = None  # the codec began the job (after any job ahead of it)
    out_ms: float | None = None  # its audio reached the engine thread's events
    audio_ms: float = 0.0
    # The listener's audio left when this chunk came out (engine view, before adding it):
    # negative is a gap of that length.
    buffered_ms: float | None = None


@dataclass
class RequestTrace:
    arrival: float  # engine clock, seconds
    prompt_tokens: int
    first_token_ms: float | None = None  # the first generated token was on the host
    # The newest token, and the engine's LLM step count at the first and newest: their ratio
    # is the step time while the request generated (summarize's `step_ms`).
    last_token_ms: float | None = None
    first_token_step: int | None = None
    last_token_step: int | None = None
    first_chunk_ready_ms: float | None = None  # the first chunk's tokens all existed (host)
    chunks: list[ChunkTrace] = field(default_factory=list)
    tokens: int = 0
    status: str = ""

    def ms(self, now: float) -> float:
        return round(1e3 * (now - self.arrival), 2)

    def token(self, now: float, llm_steps: int) -> None:
        """A generated token reached the host; `llm_steps` the engine's LLM steps so far."""
        if self.first_token_ms is None:
            self.first_token_ms, self.first_token_step = self.ms(now), llm_steps
        self.last_token_ms, self.last_token_step = self.ms(now), llm_steps

    def first_chunk_ready(self, now: float) -> None:
        if self.first_chunk_ready_ms is None:
            self.first_chunk_ready_ms = self.ms(now)

    def submitted(self, now: float, tokens: int, lane: bool, rows: int) -> None:
        self.chunks.append(ChunkTrace(tokens, self.ms(now), lane, rows))

    def out(self, now: float, started: float | None, audio_s: float, buffered_s: float) -> None:
        """The newest chunk came back: `started` the job's start (engine clock, None if
        unknown), `buffered_s` the listener's audio left before this chunk's."""
        if not self.chunks:
            return
        chunk = self.chunks[-1]
        chunk.started_ms = None if started is None else self.ms(started)
        chunk.out_ms = self.ms(now)
        chunk.audio_ms = round(1e3 * audio_s, 2)
        chunk.buffered_ms = round(1e3 * buffered_s, 2)

    def to_json(self, request_id: str) -> str:
        return json.dumps({"request_id": request_id, **asdict(self)}, separators=(",", ":"))


class TraceWriter:
    """Appends finished requests' timelines, and requests refused at submit, to a JSON-lines
    file, a line at a time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", buffering=1)  # noqa: SIM115 - kept open
        self._turns: list[list[float]] = []  # measured turns not yet written

    def write(self, request_id: str, trace: RequestTrace) -> None:
        """A finished request's timeline, after the turns measured so far (so a reader that
        has a point's last request has its turns too)."""
        if self._file is not None:
            self._flush_turns()
            self._file.write(trace.to_json(request_id) + "\n")

    def write_refusal(
        self, arrival: float, cause: str, reason: str, outlook: OutlookInputs | None
    ) -> None:
        """A request refused at submit: its `cause` (engine/refusal_causes.py), the words its
        client got, and the outlook's inputs where the outlook refused it."""
        if self._file is not None:
            record = {
                "arrival": arrival,
                "cause": cause,
                "reason": reason,
                "outlook": None if outlook is None else outlook.to_record(),
            }
            self._file.write(json.dumps({"refused": record}, separators=(",", ":")) + "\n")

    def write_turn_model(
        self, seeds: dict[int, float], page_s: float, slope_bound_by_bursts: bool
    ) -> None:
        """What the turn cost model starts serving from (engine/turn_cost.py): the warm-up's
        burst figures by rows (seconds less their pages), the warm-up's KV page price, and
        whether the bursts bound the live slope."""
        if self._file is not None:
            record = {
                "seeds": [[rows, seconds] for rows, seconds in sorted(seeds.items())],
                "page_s": page_s,
                "slope_bound_by_bursts": slope_bound_by_bursts,
            }
            self._file.write(json.dumps({"turn_model": record}, separators=(",", ":")) + "\n")

    def write_turn(self, now: float, rows: int, pages: int, seconds: float) -> None:
        """A decode turn real-time admission measured: at `now` (engine clock), `rows` rows,
        `pages` KV pages read, `seconds` long (written TURNS_PER_LINE at a time)."""
        if self._file is None:
            return
        self._turns.append([round(now, 4), rows, pages, round(seconds, 7)])
        if len(self._turns) >= TURNS_PER_LINE:
            self._flush_turns()

    def _flush_turns(self) -> None:
        if self._file is not None and self._turns:
            self._file.write(json.dumps({"turns": self._turns}, separators=(",", ":")) + "\n")
        self._turns = []

    def close(self) -> None:
        if self._file is not None:
            self._flush_turns()
            self._file.close()
            self._file = None


def read_traces(path: str | Path, since: float = -math.inf, until: float = math.inf) -> list[dict]:
    """The timelines in `path` (gzipped if it ends in .gz, as bench/results keeps them) of
    requests that arrived in [since, until) (engine clock)."""
    return [t for t in _lines(path) if "request_id" in t and since <= t["arrival"] < until]


def read_refusals(path: str | Path) -> list[dict[str, Any]]:
    """The refusals in `path` (TraceWriter.write_refusal's records), in the order written."""
    return [line["refused"] for line in _lines(path) if "refused" in line]


@dataclass(frozen=True)
class TurnLog:
    """A trace's measured decode turns (TraceWriter.write_turn) and what the turn cost model
    started from (write_turn_model; None in a trace without it)."""

    model: dict[str, Any] | None
    turns: list[tuple[float, int, int, float]]  # (engine clock, rows, pages read, seconds)


def read_turns(path: str | Path) -> TurnLog:
    """The turns in `path`, in the order measured."""
    model, turns = None, []
    for line in _lines(path):
        if "turn_model" in line:
            model = line["turn_model"]
        elif "turns" in line:
            turns += [(float(t), int(r), int(p), float(s)) for t, r, p, s in line["turns"]]
    return TurnLog(model, turns)


def _lines(path: str | Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = sorted(values)

    def q(p: float) -> float:
        return round(v[min(len(v) - 1, int(p * len(v)))], 1)

    return {"p50": q(0.5), "p90": q(0.9), "max": round(v[-1], 1), "n": len(v)}


def summarize(traces: list[dict]) -> dict:
    """Where time to first audio and the second chunk's wait went, as percentiles (ms):
    `to_first_token` (queue + prefill), `to_first_chunk_tokens` (decode steps after it),
    `held` (the first-chunk rule building cover, or no codec free to take a job),
    `codec_wait` (a job ahead of it on its worker), `codec` (its job), `first_audio`; the same for the second chunk after the first came out;
    `step_ms`, the engine's LLM step time while each request generated (all requests' steps,
    not only its own: the load it saw);
    the lane's share of chunks; and each stream's first gap the engine saw (a chunk out after
    the listener's buffer ran dry, by the engine's playback estimate)."""
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "to_first_token",
            "to_first_chunk_tokens",
            "held",
            "codec_wait",
            "codec",
            "first_audio",
            "second_after_first",
            "second_codec_wait",
            "second_codec",
            "step_ms",
        )
    }
    gaps, chunks, lane_chunks, first_on_lane, empty, chunk_audio = [], 0, 0, 0, 0, []
    for t in traces:
        done = [c for c in t["chunks"] if c.get("out_ms") is not None]
        chunks += len(done)
        lane_chunks += sum(c["lane"] for c in done)
        # A job that took a request's tokens but gave no audio (its codec waits for more, e.g.
        # a look-ahead): the request sat out the next job for nothing. The audio of the others
        # says how large the codec's windows were (small ones cost more a frame).
        empty += sum(1 for c in done if c["audio_ms"] <= 0)
        chunk_audio += [c["audio_ms"] for c in done if c["audio_ms"] > 0]
        # A stream's first gap (later values would count it again: request.audio_lead_s).
        late = [-c["buffered_ms"] for c in done[1:] if (c["buffered_ms"] or 0) < 0]
        gaps += late[:1]
        audible = [c for c in done if c["audio_ms"] > 0]
        if t["first_token_ms"] is not None:
            parts["to_first_token"].append(t["first_token_ms"])
        steps = (t.get("last_token_step") or 0) - (t.get("first_token_step") or 0)
        if steps > 0:
            parts["step_ms"].append((t["last_token_ms"] - t["first_token_ms"]) / steps)
        if not audible:
            continue
        first = audible[0]
        first_on_lane += first["lane"]
        ready = t["first_chunk_ready_ms"]
        if ready is not None and t["first_token_ms"] is not None:
            parts["to_first_chunk_tokens"].append(ready - t["first_token_ms"])
            parts["held"].append(first["submitted_ms"] - ready)
        if first["started_ms"] is not None:
            parts["codec_wait"].append(first["started_ms"] - first["submitted_ms"])
            parts["codec"].append(first["out_ms"] - first["started_ms"])
        parts["first_audio"].append(first["out_ms"])
        if len(audible) > 1:
            second = audible[1]
            parts["second_after_first"].append(second["out_ms"] - first["out_ms"])
            if second["started_ms"] is not None:
                parts["second_codec_wait"].append(second["started_ms"] - second["submitted_ms"])
                parts["second_codec"].append(second["out_ms"] - second["started_ms"])
    out: dict = {k: _percentiles(v) for k, v in parts.items()}
    out["requests"] = len(traces)
    out["chunks"] = chunks
    out["empty_chunks"] = empty
    out["chunk_audio_ms"] = _percentiles(chunk_audio)
    out["lane_share"] = round(lane_chunks / chunks, 3) if chunks else None
    out["first_chunks_on_lane"] = first_on_lane
    out["gaps_ms"] = sorted(round(g, 1) for g in gaps)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.request_trace FILE [--since T] [--until T]`: a trace file's summary."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m engine.request_trace",
        description="Summarise a `voxgate serve --trace-requests` file: where time to first "
        "audio and gaps went (milliseconds; p50 / p90 / max).",
    )
    ap.add_argument("file")
    ap.add_argument("--since", type=float, default=-math.inf, help="engine clock, seconds")
    ap.add_argument("--until", type=float, default=math.inf, help="engine clock, seconds")
    args = ap.parse_args(argv)
    try:
        traces = read_traces(args.file, args.since, args.until)
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        ap.exit(2, f"error: cannot read {args.file} as a request trace file: {exc}\n")
    print(json.dumps(summarize(traces), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
