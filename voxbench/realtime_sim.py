"""A torch-free engine simulator for real-time admission: the real Scheduler (its admission,
lead caps and codec choices) driven by a fake clock, with an LLM whose turn costs
`fixed_s + per_row_s x rows` (+ prompt tokens, + the KV pages its rows read), listeners that
play their audio in real time from their first chunk, and arrivals over time that try again
after a refusal.

The codec is inline and free (its cost is inside the turn's), as on a CPU, unless a `SimCodec`
is given: then it runs beside the LLM as a GPU's codec thread does, one steady job at a time
(and one first-chunk lane job, if it has a lane), each taking its cost of rows, its tokens
the listener's only once the job is done. The turn's time is reported to the scheduler the
way EngineCore does (Scheduler.observe_llm_turn and observe_step), except for
`unseen_per_row_s`: work per stream that takes the wall clock but not the engine's turns
(the gateway's encoding on the same cores), which only the listeners' buffers reveal. With a
`SimDelivery`, each chunk then takes its way to the listener (the gateway's event transport,
encode and socket: `voxgate_audio_delivery_seconds` measures it), and a listener plays from
its first chunk's arrival: a chunk that arrives after the audio before it has played is late
there, whatever the engine's view of its buffer said.

The tests (tests/engine/test_realtime_capacity.py and others) drive it; so can a person, to
see what a change to admission's rules or a wrong warm-up figure costs at a GPU's scale
without a GPU: `python -m voxbench.realtime_sim` runs the capacity benchmark's ramp (N
listeners starting over `--stagger-s`, each for `--stream-s` of audio, a refused one gone) at
Orpheus' costs on an H200 (the Orpheus table of BENCHMARKS.md) unless told otherwise, and says
how many were admitted and how many ran dry:

    python -m voxbench.realtime_sim --listeners 336,400 --noise-ms 1
    python -m voxbench.realtime_sim --listeners 400 --prior-page-us 0.25   # the warm-up dear
    python -m voxbench.realtime_sim --listeners 380 --no-admission          # what holds
    python -m voxbench.realtime_sim --listeners 336 --codec-ms 4,0.05       # SNAC on a thread
    python -m voxbench.realtime_sim --listeners 336 --codec-ms 4,0.05 --delivery-ms 40,30
    python -m voxbench.realtime_sim --listeners 336 --codec-ms 6.5,0.9 --arrival-ms 10

Orpheus' codec is SNAC, whose chunk plan (models/codecs/snac_plan.py) decides when a stream's
tokens become audio: its first chunk plays its frames less 2 of look-ahead and the decoder's
delay, later ones come in whole ramp chunks (`--snac-chunk-ramp` as served). Without it the
young listeners' cover would be ~200 ms more than they get.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from models.codecs.snac_plan import SnacChunkPlan

IDLE_TICK_S = 0.002  # the loop's wait when every stream sits out (lead caps)


@dataclass(frozen=True)
class TurnCost:
    """What one loop turn costs on the simulated device."""

    fixed_s: float
    per_row_s: float
    prompt_token_s: float = 0.0
    unseen_per_row_s: float = 0.0  # wall time the engine's turn timing does not see
    per_page_s: float = 0.0  # each KV page the step reads (a GPU's decode: its rows')
    noise_s: float = 0.0  # the turns' jitter: normal, this standard deviation (seeded)
    # The loop's time an arrival takes outside any turn (admission's verdict, the submit's
    # bookkeeping): its streams wait through it, and admission's turn samples (the time
    # between step starts) hold it, as the engine's do.
    per_arrival_s: float = 0.0
    # A GPU's GEMMs past the roofline's ridge: each row beyond `ridge_rows` costs
    # `past_ridge_s` more (an H200's warm-up bursts for Orpheus: 0.007 ms a row up to 256
    # rows, ~0.024 from 256 to 336).
    ridge_rows: int = 0
    past_ridge_s: float = 0.0

    def seen(self, rows: int, prompt_tokens: int, pages: int = 0) -> float:
        return (
            self.fixed_s
            + self.per_row_s * rows
            + self.past_ridge_s * max(0, rows - self.ridge_rows)
            + self.prompt_token_s * prompt_tokens
            + self.per_page_s * pages
        )

    def capacity(self, token_s: float) -> int:
        """Streams whose turn (seen and unseen) fits a token's playback time: the most the
        device carries in real time."""
        return math.floor((token_s - self.fixed_s) / (self.per_row_s + self.unseen_per_row_s))


@dataclass(frozen=True)
class SimCodec:
    """A threaded codec's job costs on the simulated device: a steady job of r rows takes
    `fixed_s + per_row_s x r`; with `lane_rows`, first chunks go out as lane jobs of up to
    that many rows, of `lane_fixed_s + per_row_s x r` (engine/detok_threads.py)."""

    fixed_s: float
    per_row_s: float
    lane_rows: int = 0
    lane_fixed_s: float = 0.0

    def job_s(self, rows: int, lane: bool) -> float:
        return (self.lane_fixed_s if lane else self.fixed_s) + self.per_row_s * rows


@dataclass(frozen=True)
class SimDelivery:
    """Each chunk's way from the codec to its listener: `mean_s` with a normal spread of `sd_s`
    (at least 0, seeded), a stream's chunks arriving in the order made."""

    mean_s: float
    sd_s: float = 0.0


@dataclass(frozen=True)
class SimSnac:
    """Orpheus' codec's chunking (models/codecs/snac_plan.py, the plan the real detokenizer
    follows): which of a stream's tokens have become audio after each codec job. Without it the
    simulator books every token handed to the codec as audio at once; SNAC keeps a stream's
    newest frames back as look-ahead and its decoder's delay with them, so a young stream's
    first chunk plays ~200 ms less than its tokens, and past its first chunk only whole ramp
    chunks come out, unless a job hands a stream less than a chunk (the scheduler's rule for a
    listener about to run dry, asking as OrpheusModel.codec_would_emit does)."""

    plan: SnacChunkPlan = SnacChunkPlan()
    frame_tokens: int = 7
    samples_per_frame: int = 2048
    sample_rate: int = 24000
    delay_samples: int = 4757  # SNAC 24 kHz's decoder (StreamingSnacDecoder.delay_samples)


@dataclass
class _SnacStream:
    """A request's codec stream under SimSnac: tokens handed so far, frames emitted, samples
    out."""

    tokens: int = 0
    emitted: int = 0
    samples: int = 0


@dataclass
class _Listener:
    """A listener's side with a SimDelivery: when it began to play, the audio arrived before
    the chunk now on its way, and when the last chunk arrived."""

    playing_from: float
    arrived_s: float
    last_arrival: float


@dataclass
class _Job:
    """A codec job in flight: when it is done, and each request's tokens and last-chunk flag."""

    done_at: float
    lane: bool
    rows: list[tuple[Request, int, bool]]


@dataclass
class SimResult:
    admitted: int = 0
    refusals: int = 0  # refused attempts (a listener tries again after `retry_s`)
    peak_streams: int = 0  # most streams generating at once
    late_streams: set[str] = field(default_factory=set)  # listeners that ran dry
    worst_lead_s: float = 0.0  # the most negative buffer any listener saw at a chunk


class RealtimeSim:
    def __init__(
        self,
        cost: TurnCost,
        facts: ChunkingFacts,
        seeds: dict[int, float] | None = None,
        priced_pages: bool = True,
        codec: SimCodec | None = None,
        delivery: SimDelivery | None = None,
        snac: SimSnac | None = None,
        **config: object,
    ) -> None:
        """`seeds`: the warm-up bursts' figures (rows → seconds a turn); `priced_pages`:
        admission knows the cost's price of a KV page, as the engine's warm-up measures it
        on a GPU; `codec`: a threaded codec's costs (None: inline and free); `delivery`: the
        chunks' way to their listeners (None: none, the engine's view is the listener's);
        `snac`: the codec's chunking (None: every token handed to it is audio at once)."""
        self.cost = cost
        self.facts = facts
        self.codec = codec
        self.delivery = delivery
        self.snac = snac
        self._streams: dict[str, _SnacStream] = {}
        self._listeners: dict[str, _Listener] = {}
        self._ways = random.Random(1)
        self._jobs: list[_Job] = []
        self.scheduler = Scheduler(
            EngineConfig(**config),
            BlockManager(num_blocks=65536, block_size=16),
            facts,
            codec_would_emit=None if snac is None else self._would_emit,
        )
        for rows, seconds in (seeds or {}).items():
            self.scheduler.admission.capacity.steps.seed(rows, seconds)
        if priced_pages:  # a GPU's warm-up: pages priced, the bursts bounding the slope
            self.scheduler.admission.capacity.price_pages(cost.per_page_s)
            self.scheduler.admission.capacity.steps.slope_bound_by_bursts = True
        self.now = 0.0
        self._stops_at = 0  # tokens after which a stream stops by itself (run's stream_tokens)
        self._jitter = random.Random(0)
        self._last_step_start: float | None = None
        # The last turn's rows, pages and unseen seconds while it ran decode alone (None: it
        # ran prompts): the next turn's token interval, less the unseen time, is booked at
        # them, as EngineCore._observe_turn books the time between step starts.
        self._last_decode: tuple[int, int, float] | None = None

    def run(
        self,
        arrivals: list[float],
        stream_tokens: int | Sequence[int],
        until_s: float,
        retry_s: float | None = 1.0,
        prompt_tokens: int = 16,
        max_tokens: int | None = None,
        text_chars: int = 0,
    ) -> SimResult:
        """Listeners arrive at `arrivals` (seconds), each for a stream of `stream_tokens`
        tokens (or listener i for `stream_tokens[i]`, its whole request); a refused one tries
        again `retry_s` later (None: gives up). With `max_tokens` above `stream_tokens` a
        stream asks for that ceiling and stops by itself at its length, as a real model's do,
        for a text of `text_chars` characters."""
        lengths = None if isinstance(stream_tokens, int) else list(stream_tokens)
        self._stops_at = max(lengths) if lengths else stream_tokens
        sched, result = self.scheduler, SimResult()
        queue = [(t, i) for i, t in enumerate(arrivals)]
        heapq.heapify(queue)
        while self.now < until_s:
            while queue and queue[0][0] <= self.now:
                _, listener = heapq.heappop(queue)
                length = lengths[listener] if lengths else max(self._stops_at, max_tokens or 0)
                request = Request(
                    [1] * prompt_tokens,
                    SamplingParams(max_tokens=length),
                    self.now,
                    text_chars=text_chars,
                )
                decision = sched.admit(request)
                self.now += self.cost.per_arrival_s
                if decision.ok:
                    result.admitted += 1
                else:
                    result.refusals += 1
                    if retry_s is not None:
                        heapq.heappush(queue, (self.now + retry_s, listener))
            if not sched.requests:
                self.now = queue[0][0] if queue else until_s
                continue
            self._turn(result)
            generating = sum(1 for r in sched.requests.values() if r.wants_tokens)
            result.peak_streams = max(result.peak_streams, generating)
        return result

    def _turn(self, result: SimResult) -> None:
        sched, now = self.scheduler, self.now
        plan = sched.schedule(now)
        rows = len(plan.chunks)
        prompt = sum(c.num_tokens for c in plan.chunks if c.start < c.request.num_prompt_tokens)
        if rows:
            pages = plan.pages_read  # a step reads its rows' KV, not that of streams sitting out
            seen = self.cost.seen(rows, prompt, pages)
            if self.cost.noise_s:
                seen = max(0.2 * seen, seen + self._jitter.gauss(0.0, self.cost.noise_s))
            interval, busy = self._token_interval(seen)
            sched.observe_llm_turn(interval)
            if busy and self._last_decode is not None:  # the last turn, arrivals' time in it
                rows_then, pages_then, unseen_then = self._last_decode
                sched.observe_step(rows_then, interval - unseen_then, pages_then)
            unseen = self.cost.unseen_per_row_s * rows
            self._last_decode = (rows, pages, unseen) if plan.num_tokens == rows else None
            self.now += seen + unseen
        else:
            self.now += IDLE_TICK_S
        for chunk in plan.chunks:
            request = chunk.request
            request.num_computed = chunk.start + chunk.num_tokens
            if chunk.samples:
                request.output_ids.append(7)
                request.status = RequestStatus.RUNNING
                if len(request.output_ids) >= request.sampling.max_tokens:
                    sched.finish_generation(request, RequestStatus.FINISHED_LENGTH)
                elif len(request.output_ids) >= self._stops_at:
                    sched.finish_generation(request, RequestStatus.FINISHED_STOPPED)
        self._codec(result)

    def _token_interval(self, seen: float) -> tuple[float, bool]:
        """EngineCore._token_interval: the time since the last step's start (arrivals' loop
        time included) while the loop is busy, else the turn itself; and whether it was busy."""
        last, self._last_step_start = self._last_step_start, self.now
        if last is None or self.now - last > 4 * max(seen, self.scheduler.step_time_s):
            return seen, False
        return self.now - last, True

    def _codec(self, result: SimResult) -> None:
        now = self.now

        def heard(request: Request, audio_s: float) -> None:  # a chunk of `audio_s` comes out
            if self.delivery is not None:
                self._arrive(request, audio_s, result)
            elif request.first_audio_time is not None:  # the listener's lead as it comes out
                lead = request.audio_lead_s(now)
                result.worst_lead_s = min(result.worst_lead_s, lead)
                if lead < 0:
                    result.late_streams.add(request.request_id)

        if self.codec is None:
            for request in self.scheduler.schedule_detok(now):
                final = request.finished
                audio_s = self._audio_of(request, len(request.hand_to_codec()), final)
                deliver(self.scheduler, request, now, audio_s, final, heard)
            return
        self._finish_jobs(heard)
        self._submit_jobs()

    def _arrive(self, request: Request, audio_s: float, result: SimResult) -> None:
        """A chunk of `audio_s` on its way to `request`'s listener (SimDelivery): late if it
        arrives after the audio before it has played."""
        if audio_s <= 0:
            return
        way = self.delivery
        assert way is not None
        at = self.now + max(0.0, self._ways.gauss(way.mean_s, way.sd_s))
        seen = self._listeners.get(request.request_id)
        if seen is None:
            self._listeners[request.request_id] = _Listener(at, audio_s, at)
            return
        at = max(at, seen.last_arrival)  # a stream's chunks arrive in order
        lead = seen.playing_from + seen.arrived_s - at
        result.worst_lead_s = min(result.worst_lead_s, lead)
        if lead < 0:
            result.late_streams.add(request.request_id)
        seen.arrived_s += audio_s
        seen.last_arrival = at

    def _would_emit(self, request: Request) -> bool:
        """OrpheusModel.codec_would_emit under SimSnac: whether the request's pending tokens
        would give audio now."""
        snac = self.snac
        assert snac is not None
        stream = self._streams.get(request.request_id, _SnacStream())
        frames = stream.tokens // snac.frame_tokens
        partial = stream.tokens % snac.frame_tokens
        new_frames = (partial + request.pending_detok_tokens) // snac.frame_tokens
        return snac.plan.would_emit(stream.emitted, frames, new_frames, hurry=True)

    def _audio_of(self, request: Request, tokens: int, final: bool) -> float:
        """Seconds of audio a codec job makes of `tokens` more of the request's tokens: all of
        them without SimSnac, else what its chunk plan lets out."""
        snac = self.snac
        if snac is None:
            return tokens * self.facts.seconds_per_token
        stream = self._streams.setdefault(request.request_id, _SnacStream())
        stream.tokens += tokens
        total = stream.tokens // snac.frame_tokens
        hurry = snac.plan.hurried(tokens / snac.frame_tokens, final)  # as OrpheusModel's
        chunks = snac.plan.chunks(stream.emitted, total, final, hurry)
        if chunks:
            stream.emitted = chunks[-1][1]
        samples = snac.plan.samples_out(
            stream.emitted, total, final, snac.samples_per_frame, snac.delay_samples
        )
        made, stream.samples = samples - stream.samples, samples
        if final:
            del self._streams[request.request_id]
        return made / snac.sample_rate

    def _finish_jobs(self, before_audio: Callable[[Request, float], None]) -> None:
        """The jobs done by now: their audio out (AudioOut.collect's bookkeeping)."""
        sched, now = self.scheduler, self.now
        for job in [j for j in self._jobs if j.done_at <= now]:
            self._jobs.remove(job)
            audio = [(r, self._audio_of(r, tokens, final), final) for r, tokens, final in job.rows]
            made_s = sum(audio_s for _, audio_s, _ in audio)
            sched.observe_codec_job(self.codec.job_s(len(job.rows), job.lane), made_s, job.lane)
            for request, audio_s, final in audio:
                deliver(sched, request, now, audio_s, final, before_audio)

    def _submit_jobs(self) -> None:
        """New jobs where the steady job or the lane is free (Worker.detok_job's bookkeeping)."""
        sched, now, codec = self.scheduler, self.now, self.codec
        steady_free = not any(not j.lane for j in self._jobs)
        lane_free = codec.lane_rows > 0 and not any(j.lane for j in self._jobs)
        plan = sched.schedule_detok_jobs(
            now, steady_free, codec.lane_rows if lane_free else 0, has_lane=codec.lane_rows > 0
        )
        for lane, picked in ((True, plan.lane), (False, plan.steady)):
            if not picked:
                continue
            rows = []
            for request in picked:
                tokens = len(request.hand_to_codec())
                rows.append((request, tokens, request.finished))
            self._jobs.append(_Job(now + codec.job_s(len(rows), lane), lane, rows))


def decode_instantly(sched: Scheduler, now: float) -> None:
    """The codec's pick at `now` decoded in no time: each picked request's pending tokens go
    out as audio at once, and a finished one leaves."""
    for request in sched.schedule_detok(now):
        audio_s = len(request.hand_to_codec()) * sched.facts.seconds_per_token
        deliver(sched, request, now, audio_s, request.finished)


def deliver(
    sched: Scheduler,
    request: Request,
    now: float,
    audio_s: float,
    final: bool,
    before_audio: Callable[[Request, float], None] | None = None,
) -> None:
    """A chunk of `audio_s` decoded, as AudioOut.collect books it: the codec done with the
    request, its listener's lead read just before the audio lands (`before_audio`, given the
    chunk's audio), the audio out, and after its last chunk the request gone."""
    request.codec_returned()
    if before_audio is not None:
        before_audio(request, audio_s)
    if audio_s > 0:
        sched.audio_out(request, now, audio_s)
    if final:
        request.detok_done = True
        sched.remove(request.request_id)


def steady_arrivals(count: int, per_second: float, start_s: float = 0.0) -> list[float]:
    """`count` listeners arriving one every 1/per_second seconds."""
    return [start_s + i / per_second for i in range(count)]


def poisson_arrivals(per_second: float, span_s: float, seed: int = 0) -> list[float]:
    """Listeners arriving at random over `span_s` at `per_second` on average (the goodput
    benchmark's arrivals), seeded."""
    rng, times, t = random.Random(seed), [], 0.0
    while (t := t + rng.expovariate(per_second)) < span_s:
        times.append(t)
    return times


# Orpheus on an H200 (BENCHMARKS.md, the Orpheus table's capacity points): SNAC's frame of 2,048
# samples at 24 kHz is 7 tokens; a first chunk once 3 frames are in (1 and its 2 look-ahead),
# chunks of 4 frames, large ones of 8 (OrpheusModel's facts, SnacChunkPlan's defaults).
ORPHEUS_TOKEN_S = 2048 / 24000 / 7
ORPHEUS_FACTS = ChunkingFacts(
    first_chunk_tokens=21,
    chunk_tokens=28,
    seconds_per_token=ORPHEUS_TOKEN_S,
    frame_tokens=7,
    held_back_tokens=17,
    large_chunk_tokens=56,
)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m voxbench.realtime_sim",
        description="The capacity benchmark's ramp through the real scheduler on a simulated "
        "device (defaults: Orpheus' costs on an H200): listeners admitted and late.",
    )
    ap.add_argument("--listeners", default="336", help="comma-separated counts (default 336)")
    ap.add_argument("--stagger-s", type=float, default=10.0)
    ap.add_argument("--stream-s", type=float, default=30.0)
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument(
        "--turn-ms", default="2.72,0.0051", help="a turn's FIXED,PER_ROW ms (default 2.72,0.0051)"
    )
    ap.add_argument("--page-us", type=float, default=0.229, help="a KV page's true cost, µs")
    ap.add_argument(
        "--prior-page-us", type=float, help="the warm-up's price of a page (default: the true)"
    )
    ap.add_argument(
        "--burst-slope-ms",
        type=float,
        default=0.0101,
        help="ms a row of the warm-up bursts' turns (default 0.0101, as measured)",
    )
    ap.add_argument("--noise-ms", type=float, default=0.0, help="the turns' jitter (normal, sd)")
    ap.add_argument(
        "--codec-ms",
        help="a codec thread beside the LLM whose steady job takes FIXED,PER_ROW ms "
        "(default: inline and free, as on a CPU)",
    )
    ap.add_argument(
        "--delivery-ms",
        help="each chunk's way from the codec to its listener, MEAN,SD ms (normal, at least 0; "
        "default: none)",
    )
    ap.add_argument(
        "--arrival-ms",
        type=float,
        default=0.0,
        help="the loop's time each arrival takes outside any turn (admission's verdict, the "
        "submit), which the streams wait through and admission's turn samples hold (default 0)",
    )
    ap.add_argument(
        "--snac-chunk-ramp",
        type=float,
        default=1.0,
        help="SNAC's chunk ramp, as `voxgate serve --snac-chunk-ramp` (default 1)",
    )
    ap.add_argument("--max-num-seqs", type=int, default=336)
    ap.add_argument(
        "--ridge",
        help="ROWS,PER_ROW: each row of a turn beyond ROWS costs PER_ROW ms more, the warm-up "
        "bursts' too (a GPU's GEMMs past the roofline's ridge; an H200's Orpheus: 256,0.02)",
    )
    ap.add_argument("--no-admission", action="store_true", help="real-time admission off")
    args = ap.parse_args(argv)
    try:
        counts = [int(n) for n in args.listeners.split(",")]
        fixed_ms, per_row_ms = (float(x) for x in args.turn_ms.split(","))
        ridge, past_ridge_ms = args.ridge.split(",") if args.ridge else ("0", "0")
        ridge_rows, past_ridge_ms = int(ridge), float(past_ridge_ms)
        codec = None
        if args.codec_ms:
            codec_fixed_ms, codec_row_ms = (float(x) for x in args.codec_ms.split(","))
            codec = SimCodec(codec_fixed_ms / 1e3, codec_row_ms / 1e3)
        delivery = None
        if args.delivery_ms:
            mean_ms, sd_ms = (float(x) for x in args.delivery_ms.split(","))
            delivery = SimDelivery(mean_ms / 1e3, sd_ms / 1e3)
    except ValueError:
        ap.error(
            "--listeners takes counts like 336,400, --turn-ms and --codec-ms FIXED,PER_ROW "
            "in ms, --ridge ROWS,PER_ROW (ms) and --delivery-ms MEAN,SD in ms"
        )
    if min(counts) < 1 or args.stagger_s < 0 or args.stream_s <= 0:
        ap.error("--listeners must be >= 1, --stagger-s >= 0 and --stream-s > 0")
    if codec is not None and min(codec.fixed_s, codec.per_row_s) < 0:
        ap.error("--codec-ms takes costs >= 0")
    if delivery is not None and min(delivery.mean_s, delivery.sd_s) < 0:
        ap.error("--delivery-ms takes times >= 0")
    if args.arrival_ms < 0:
        ap.error("--arrival-ms takes a time >= 0")
    if min(ridge_rows, past_ridge_ms) < 0:
        ap.error("--ridge takes rows and a cost >= 0")
    try:
        snac = SimSnac(SnacChunkPlan(chunk_ramp=args.snac_chunk_ramp))
    except ValueError as exc:
        ap.error(f"--snac-chunk-ramp: {exc}")
    cost = TurnCost(
        fixed_s=fixed_ms / 1e3,
        per_row_s=per_row_ms / 1e3,
        prompt_token_s=2e-6,
        per_page_s=args.page_us * 1e-6,
        noise_s=args.noise_ms / 1e3,
        per_arrival_s=args.arrival_ms / 1e3,
        ridge_rows=ridge_rows,
        past_ridge_s=past_ridge_ms / 1e3,
    )
    # The warm-up's bursts, up to the largest batch (the engine's: up to max_num_seqs).
    seeds = {
        r: (fixed_ms + args.burst_slope_ms * r + past_ridge_ms * max(0, r - ridge_rows)) / 1e3
        for r in (1, 16, 64, 128, 256, args.max_num_seqs or max(counts))
    }
    stream_tokens = round(args.stream_s / ORPHEUS_TOKEN_S)
    for n in counts:
        sim = RealtimeSim(
            cost,
            ORPHEUS_FACTS,
            seeds,
            codec=codec,
            delivery=delivery,
            snac=snac,
            realtime_admission=not args.no_admission,
            max_num_seqs=args.max_num_seqs,
        )
        if args.prior_page_us is not None:
            sim.scheduler.admission.capacity.price_pages(args.prior_page_us * 1e-6)
        arrivals = [args.stagger_s * i / n for i in range(n)]
        result = sim.run(
            arrivals,
            stream_tokens,
            until_s=args.stagger_s + args.stream_s + 10,
            retry_s=None,
            prompt_tokens=args.prompt_tokens,
        )
        print(
            f"{n} listeners: {result.admitted} admitted, {result.refusals} refused, "
            f"{len(result.late_streams)} late (worst lead {result.worst_lead_s:.2f} s), "
            f"page priced {1e6 * sim.scheduler.admission.capacity.page_s:.3f} µs at the end"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
