"""The Qwen3-TTS per-request baseline (voxbench/qwen3_tts_baseline.py) on tiny-qwen3-tts:
transformers' Qwen3 for the talker and the code predictor, frame by frame, the audio decoded
once the utterance is whole, behind the engine surface the gateway drives."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from baseline_testkit import assert_cancels_a_running_request, audio_of

from engine.api import FinishReason, SamplingParams, SpeechRequest
from models.base import ModelInputError
from tests.torch_threads import one_torch_thread
from voxbench.baselines import load_baseline
from voxbench.per_request import Job
from voxbench.qwen3_tts_baseline import decode_like_the_package


@pytest.fixture(scope="module")
def baseline():
    with one_torch_thread():  # for the module (tests/torch_threads.py: why)
        b = load_baseline("tiny-qwen3-tts", "cpu")
        yield b
        asyncio.run(b.shutdown())


def frames(n: int, **sampling) -> SamplingParams:
    """n frames exactly; greedy unless told otherwise."""
    given = {"temperature": 0.0, "repetition_penalty": 1.0, **sampling}
    return SamplingParams(min_tokens=n, max_tokens=n, **given)


async def test_the_baseline_sends_the_whole_utterance_once_it_is_made(baseline):
    # The package decodes after generating: one chunk of 1920 samples a frame.
    request = SpeechRequest("Hello there.", voice="vivian", sampling=frames(7), request_id="a")
    chunks, finished = await audio_of(baseline, request)
    assert finished.reason is FinishReason.LENGTH and finished.num_tokens == 7
    assert [len(c) for c in chunks] == [7 * 1920]
    assert np.abs(chunks[0]).max() > 0

    async def sampled(seed: int) -> np.ndarray:
        sampling = frames(4, temperature=0.9, top_k=50, repetition_penalty=1.05, seed=seed)
        chunks, _ = await audio_of(baseline, SpeechRequest("Hello there.", sampling=sampling))
        return np.concatenate(chunks)

    first, same, other = await sampled(1), await sampled(1), await sampled(2)
    np.testing.assert_array_equal(first, same)  # a seed fixes the draws
    assert not np.array_equal(first, other)


def test_the_baselines_greedy_codes_are_the_engines(baseline):
    """The same weights through the engine (its talker on the paged KV, its batched depth
    stage) and through the baseline (transformers' Qwen3, one request): the same greedy
    codes, all 16 codebooks of every frame, with a language and an instruction in the
    prompt. The engine's equal the official package's (tests/models/qwen3_tts)."""
    from engine.config import EngineConfig
    from engine.core import EngineCore

    options = {"language": "english", "instruction": "Speak slowly."}
    request = SpeechRequest("A second sentence.", "ryan", frames(6), model_options=options)
    core = EngineCore(baseline.model, EngineConfig(device="cpu"), torch.device("cpu"), "sdpa")
    served = core.add_request(request)
    while core.has_work():
        core.step()
    engine_codes = [list(map(int, row[: baseline.model.k])) for row in served.output_ids]
    stream = None  # codes() pushes nothing
    codes, reason = baseline.codes(
        Job("p", baseline.request_prompt(request), request.sampling, stream)
    )
    assert reason is FinishReason.LENGTH and len(engine_codes) == 6
    assert codes == engine_codes


def test_long_utterances_decode_in_the_packages_pieces(baseline):
    """Past 300 frames the package decodes pieces of 300, each from scratch with the 25 frames
    before it as context, whose audio it drops. The tiny decoder hears less than 25 frames
    back, so the pieces make the whole-utterance audio up to rounding (the first piece's
    kernels run at another length than the whole's, which may order their sums otherwise:
    2.6e-5 apart seen; the second's positions start at 0). Without the context, or
    misaligned, the second piece's audio would be another."""
    decoder = baseline.model.decoder
    codes = torch.randint(0, 2048, (310, 16), generator=torch.Generator().manual_seed(0))
    pieces = decode_like_the_package(decoder, codes)
    whole = decoder.decode(codes.T[None])[0].numpy()
    assert pieces.shape == whole.shape == (310 * 1920,)
    cut = 300 * 1920
    np.testing.assert_allclose(pieces[:cut], whole[:cut], atol=1e-4, rtol=0)
    np.testing.assert_allclose(pieces[cut:], whole[cut:], atol=2e-4, rtol=0)


async def test_the_bench_measures_the_baselines_throughput(baseline):
    """`voxgate bench --baseline-throughput` on it: a burst through the engine surface, the
    model's sampling defaults, min_tokens = max_tokens."""
    from voxbench.config import BenchConfig
    from voxbench.throughput import measure_rtf
    from voxbench.workload import burst_plan, load_workload

    items = load_workload(BenchConfig(serve=True).workload, max_audio_seconds=0.5)
    plan = burst_plan(items, 2, baseline.facts.token_rate_hz)
    result = await measure_rtf(baseline, plan, warmup=0)
    assert result["requests"] == 2 and result["finish"] == {"length": 2}
    assert result["audio_s"] == pytest.approx(2 * 6 * 1920 / 24000, abs=1e-3)  # 6 frames each


async def test_the_baseline_cancels_and_refuses_bad_input(baseline):
    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("hi", voice="nobody"))
    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("hi", model_options={"language": "klingon"}))
    assert not baseline.facts.appends_text and not baseline.facts.voice_cloning
    await assert_cancels_a_running_request(baseline, frames(2000))
