"""A torch-free engine simulator for real-time admission: the real Scheduler (its admission,
lead caps and codec choices) driven by a fake clock, with an LLM whose turn costs
`fixed_s + per_row_s x rows` (+ prompt tokens, + the KV pages its rows read), listeners that
play their audio in real time from their first chunk, and arrivals over time that try again
after a refusal.

The codec is inline and free (its cost is inside the turn's), as on a CPU; the turn's time is
reported to the scheduler the way EngineCore does (Scheduler.observe_llm_turn and
observe_step), except for
`unseen_per_row_s`: work per stream that takes the wall clock but not the engine's turns
(the gateway's encoding on the same cores), which only the listeners' buffers reveal.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler

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

    def seen(self, rows: int, prompt_tokens: int, pages: int = 0) -> float:
        return (
            self.fixed_s
            + self.per_row_s * rows
            + self.prompt_token_s * prompt_tokens
            + self.per_page_s * pages
        )

    def capacity(self, token_s: float) -> int:
        """Streams whose turn (seen and unseen) fits a token's playback time: the most the
        device carries in real time."""
        return math.floor((token_s - self.fixed_s) / (self.per_row_s + self.unseen_per_row_s))


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
        **config: object,
    ) -> None:
        """`seeds`: the warm-up bursts' figures (rows → seconds a turn); `priced_pages`:
        admission knows the cost's price of a KV page, as the engine's warm-up measures it
        on a GPU."""
        self.cost = cost
        self.facts = facts
        self.scheduler = Scheduler(
            EngineConfig(**config), BlockManager(num_blocks=65536, block_size=16), facts
        )
        for rows, seconds in (seeds or {}).items():
            self.scheduler.capacity.steps.seed(rows, seconds)
        if priced_pages:
            self.scheduler.capacity.page_s = cost.per_page_s
        self.now = 0.0
        self._stops_at = 0  # tokens after which a stream stops by itself (run's stream_tokens)
        self._jitter = random.Random(0)

    def run(
        self,
        arrivals: list[float],
        stream_tokens: int,
        until_s: float,
        retry_s: float | None = 1.0,
        prompt_tokens: int = 16,
        max_tokens: int | None = None,
        text_chars: int = 0,
    ) -> SimResult:
        """Listeners arrive at `arrivals` (seconds), each for a stream of `stream_tokens`
        tokens; a refused one tries again `retry_s` later (None: gives up). With `max_tokens`
        above `stream_tokens` a stream asks for that ceiling and stops by itself at its
        length, as a real model's do, for a text of `text_chars` characters."""
        self._stops_at = stream_tokens
        sched, result = self.scheduler, SimResult()
        queue = [(t, i) for i, t in enumerate(arrivals)]
        heapq.heapify(queue)
        while self.now < until_s:
            while queue and queue[0][0] <= self.now:
                _, listener = heapq.heappop(queue)
                request = Request(
                    [1] * prompt_tokens,
                    SamplingParams(max_tokens=max(stream_tokens, max_tokens or 0)),
                    self.now,
                    text_chars=text_chars,
                )
                decision = sched.admit(request)
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
            self.now += seen + self.cost.unseen_per_row_s * rows
            sched.observe_llm_turn(seen)
            if plan.num_tokens == rows:
                sched.observe_step(rows, seen, pages)
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

    def _codec(self, result: SimResult) -> None:
        sched, now = self.scheduler, self.now
        for request in sched.schedule_detok(now):
            if request.first_audio_time is not None:
                lead = request.audio_lead_s(now)
                result.worst_lead_s = min(result.worst_lead_s, lead)
                if lead < 0:
                    result.late_streams.add(request.request_id)
            seconds = request.pending_detok_tokens * self.facts.seconds_per_token
            request.num_detokenized = len(request.output_ids)
            if seconds:
                sched.audio_out(request, now, seconds)
            if request.finished:
                sched.remove(request.request_id)


def steady_arrivals(count: int, per_second: float, start_s: float = 0.0) -> list[float]:
    """`count` listeners arriving one every 1/per_second seconds."""
    return [start_s + i / per_second for i in range(count)]
