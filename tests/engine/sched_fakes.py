"""The scheduler's test harness (no torch): a Scheduler over a KV pool of plain integers,
requests admitted at a fake clock's times, and the engine core's step applied with dummy
tokens. Each test module keeps its model's ChunkingFacts and binds them (make_scheduler's
first argument)."""

from __future__ import annotations

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import ChunkingFacts, Scheduler
from voxbench.realtime_sim import decode_instantly

DUMMY_TOKEN = 7


def make_scheduler(
    facts: ChunkingFacts, policy: str = "slack", num_blocks: int = 512, **overrides
) -> Scheduler:
    """A scheduler of `facts` with EngineConfig's defaults but `policy` and `overrides`."""
    config = EngineConfig(policy=policy, **overrides)
    return Scheduler(config, BlockManager(num_blocks=num_blocks, block_size=16), facts)


def admit(
    sched: Scheduler,
    arrival: float,
    prompt_len: int = 10,
    max_tokens: int = 400,
    realtime: bool = True,
) -> Request:
    """A request of `prompt_len` prompt tokens arriving at `arrival`, which must be admitted."""
    request = Request(
        list(range(prompt_len)), SamplingParams(max_tokens=max_tokens), arrival, realtime=realtime
    )
    assert sched.admit(request).ok
    return request


def streaming(
    sched: Scheduler,
    arrival: float,
    now: float,
    buffered_s: float,
    realtime: bool = True,
    max_tokens: int = 400,
) -> Request:
    """A request past its prefill with 100 tokens made and decoded, whose audio started a
    second ago and is `buffered_s` ahead of its listener (if it has one)."""
    request = admit(sched, arrival, max_tokens=max_tokens, realtime=realtime)
    request.output_ids = [DUMMY_TOKEN] * 100
    request.num_computed = request.num_prompt_tokens + 99
    request.status = RequestStatus.RUNNING
    request.num_detokenized = 100
    request.first_audio_time = now - 1.0
    request.audio_emitted_s = 1.0 + buffered_s
    sched.blocks.ensure(request.request_id, request.num_tokens)
    request.block_table = sched.blocks.table(request.request_id)
    return request


def apply_llm_step(sched: Scheduler, now: float) -> None:
    """Schedule and apply one LLM step the way the engine core does, with a dummy token."""
    for chunk in sched.schedule(now).chunks:
        request = chunk.request
        request.num_computed = chunk.start + chunk.num_tokens
        if chunk.samples:
            request.output_ids.append(DUMMY_TOKEN)
            request.status = RequestStatus.RUNNING
            if len(request.output_ids) >= request.sampling.max_tokens:
                sched.finish_generation(request, RequestStatus.FINISHED_LENGTH)


def fake_step(sched: Scheduler, now: float) -> None:
    """One step the way the engine core does it: the LLM's, then an instant codec job of the
    steady pick whose audio goes out at once."""
    apply_llm_step(sched, now)
    decode_instantly(sched, now)
