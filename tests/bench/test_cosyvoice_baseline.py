"""The CosyVoice 2 per-request baseline (voxbench/cosyvoice_baseline.py) on
tiny-cosyvoice2: transformers' Qwen2 token by token, CosyVoice's own streaming, the engine
surface the gateway drives."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from baseline_testkit import (
    assert_cancels_a_running_request,
    assert_refuses_an_unknown_voice_and_blank_text,
    audio_of,
)

from engine.api import FinishReason, SamplingParams, SpeechRequest
from voxbench.baselines import load_baseline


@pytest.fixture(scope="module")
def baseline():
    b = load_baseline("tiny-cosyvoice2", "cpu")
    yield b
    asyncio.run(b.shutdown())


def greedy(tokens: int) -> SamplingParams:
    # No repetition penalty: CosyVoice applies none, so the baseline ignores it.
    return SamplingParams(
        temperature=0.0, repetition_penalty=1.0, min_tokens=tokens, max_tokens=tokens
    )


async def test_the_baseline_streams_cosyvoices_chunks_of_the_whole_utterance(baseline):
    # 60 tokens: chunks once 28 exist and at 53 (every 25 more), then the rest at the end;
    # in all, the utterance's audio (2 mel frames a token).
    chunks, finished = await audio_of(
        baseline, SpeechRequest("Hello there.", sampling=greedy(60), request_id="a")
    )
    assert finished.reason is FinishReason.LENGTH and finished.num_tokens == 60
    assert len(chunks) == 3
    samples = baseline.detok.samples_per_frame * baseline.detok.ratio * 60
    assert sum(len(c) for c in chunks) == samples
    again, _ = await audio_of(
        baseline, SpeechRequest("Hello there.", sampling=greedy(60), request_id="b")
    )
    np.testing.assert_array_equal(np.concatenate(chunks), np.concatenate(again))

    async def sampled(seed: int) -> np.ndarray:
        sampling = SamplingParams(
            temperature=1.0, top_p=0.8, top_k=25, seed=seed, min_tokens=30, max_tokens=30
        )
        chunks, _ = await audio_of(baseline, SpeechRequest("Hello there.", sampling=sampling))
        return np.concatenate(chunks)

    first, same, other = await sampled(1), await sampled(1), await sampled(2)
    np.testing.assert_array_equal(first, same)  # a seed fixes the draw
    assert not np.array_equal(first, other)


async def test_the_baselines_greedy_tokens_are_the_engines(baseline):
    """The same checkpoint through the engine (its own Qwen2 on the paged KV, batched) and
    through the baseline (transformers' Qwen2, one request): the same greedy speech tokens."""
    import torch

    from engine.config import EngineConfig
    from engine.core import EngineCore

    model = baseline.model
    core = EngineCore(model, EngineConfig(device="cpu"), torch.device("cpu"), "sdpa")
    req = core.add_request(SpeechRequest("Hello there.", sampling=greedy(28)))
    while core.has_work():
        core.step()
    engine_codes = [model.llm.ids.code_of(t) for t in req.output_ids]
    assert len(engine_codes) == 28
    recorded: list[int] = []
    push = baseline.detok.push
    baseline.detok.push = lambda state, codes: (recorded.extend(codes), push(state, codes))
    try:
        await audio_of(baseline, SpeechRequest("Hello there.", sampling=greedy(28)))
    finally:
        baseline.detok.push = push
    assert recorded == engine_codes


async def test_the_baseline_cancels_and_refuses_bad_input(baseline):
    await assert_refuses_an_unknown_voice_and_blank_text(baseline)
    await assert_cancels_a_running_request(baseline, greedy(2000))
