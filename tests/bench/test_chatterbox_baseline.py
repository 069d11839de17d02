"""The Chatterbox per-request baseline (voxbench/chatterbox_baseline.py) on tiny-chatterbox:
transformers' Llama over T3's two CFG rows token by token, T3.inference's sampling, one S3Gen
decode of the whole utterance at the end, behind the engine surface the gateway drives. Its
greedy tokens equal the engine's and (where `make reference-deps` installed it) the official
package's."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from baseline_testkit import (
    assert_cancels_a_running_request,
    assert_refuses_an_unknown_voice_and_blank_text,
    audio_of,
)

from engine.api import FinishReason, SamplingParams, SpeechRequest
from models.base import ModelInputError
from models.chatterbox.config import SAMPLE_RATE, TOKEN_RATE
from tests.torch_threads import one_torch_thread
from voxbench.baselines import load_baseline
from voxbench.chatterbox_baseline import ChatterboxBaseline
from voxbench.chatterbox_llama import t3_llama
from voxbench.per_request import Job

TEXT = "Hello there, how are you?"
SAMPLES_PER_TOKEN = SAMPLE_RATE // TOKEN_RATE  # 960: two mel frames of 480


@pytest.fixture(scope="module")
def baseline():
    with one_torch_thread():  # for the module (tests/torch_threads.py: why)
        b = load_baseline("tiny-chatterbox", "cpu")
        yield b
        asyncio.run(b.shutdown())


def tokens(n: int, min_tokens: int | None = None, **sampling) -> SamplingParams:
    """n tokens (exactly, unless min_tokens says otherwise); greedy with generate()'s
    repetition penalty unless told otherwise."""
    given = {"temperature": 0.0, "repetition_penalty": 1.2, **sampling}
    return SamplingParams(min_tokens=n if min_tokens is None else min_tokens, max_tokens=n, **given)


def job(baseline, request: SpeechRequest) -> Job:
    """A request as the worker gets it; speech_tokens pushes nothing to its stream."""
    prompt = baseline.request_prompt(request)
    options = dict(request.model_options)
    return Job("t", prompt, request.sampling, None, request.voice, model_options=options)


async def test_a_request_is_one_decode_of_its_tokens_at_the_end(baseline):
    # generate() returns the whole waveform once T3 ends: one chunk, 960 samples a token.
    request = SpeechRequest(TEXT, sampling=tokens(30), request_id="a")
    chunks, finished = await audio_of(baseline, request)
    assert finished.reason is FinishReason.LENGTH and finished.num_tokens == 30
    assert [len(c) for c in chunks] == [30 * SAMPLES_PER_TOKEN]
    codes, _ = baseline.speech_tokens(job(baseline, request))
    voice = baseline.model.voices["default"].s3gen
    np.testing.assert_array_equal(chunks[0], baseline.model.parts.s3gen.decode(codes, voice))
    assert np.abs(chunks[0]).max() > 0

    async def sampled(seed: int) -> np.ndarray:
        sampling = tokens(12, temperature=0.8, min_p=0.05, top_p=0.9, seed=seed)
        chunks, _ = await audio_of(baseline, SpeechRequest(TEXT, sampling=sampling))
        return np.concatenate(chunks)

    first, same, other = await sampled(1), await sampled(1), await sampled(2)
    np.testing.assert_array_equal(first, same)  # a seed fixes the draw
    assert not np.array_equal(first, other)


def test_the_baselines_greedy_tokens_are_the_engines(baseline):
    """The same weights through the engine (T3's blocks on the paged KV, the CFG rows as
    stacked heads) and through the baseline (transformers' Llama, a batch of two): the same
    greedy speech tokens, with non-default exaggeration and CFG weight, which change them."""
    from engine.config import EngineConfig
    from engine.core import EngineCore

    n, options = 24, {"exaggeration": 1.2, "cfg_weight": 0.9}
    request = SpeechRequest(TEXT, sampling=tokens(n), model_options=options)
    with one_torch_thread():
        core = EngineCore(baseline.model, EngineConfig(device="cpu"), torch.device("cpu"), "sdpa")
        served = core.add_request(request)
        while core.has_work():
            core.step()
        ids = baseline.model.ids
        engine_tokens = [row[0] - ids.speech_base for row in served.output_ids]
        got, reason = baseline.speech_tokens(job(baseline, request))
        plain, _ = baseline.speech_tokens(job(baseline, SpeechRequest(TEXT, sampling=tokens(n))))
    assert reason is FinishReason.LENGTH and len(engine_tokens) == n
    assert len(set(got)) > 3, "the comparison needs varied tokens"
    assert got == engine_tokens
    assert plain != got  # the options reach both the prompt and the guidance


def test_the_baselines_greedy_tokens_are_the_packages(tmp_path_factory):
    """Against the official T3.inference (tests/models/official_chatterbox_t3.py; skipped
    without it): the baseline around the official weights' T3 (the whole head sampled, as
    the package does) gives the package's greedy tokens for two option settings."""
    from tests.models.official_chatterbox_t3 import (
        build_official_t3,
        engine_model_around,
        official_tokens,
        our_t3,
    )

    n = 16
    with one_torch_thread():
        official = build_official_t3()
        t3 = our_t3(official[2], tmp_path_factory.mktemp("t3"))
        model = engine_model_around(t3, tmp_path_factory.mktemp("c"))
        cpu = torch.device("cpu")
        ours = ChatterboxBaseline(t3_llama(model.t3, cpu, torch.float32), model, cpu)
        voice, text_ids = model.parts.default_voice.t3, model.parts.tokenizer.text_ids(TEXT)
        settings = [
            {"exaggeration": 1.5, "cfg_weight": 0.3},
            {"exaggeration": 0.3, "cfg_weight": 1.0},
        ]
        wanted = []
        for options in settings:
            request = SpeechRequest(TEXT, sampling=tokens(n, min_tokens=0), model_options=options)
            got, _ = ours.speech_tokens(job(ours, request))
            want = official_tokens(
                official,
                voice.speaker,
                voice.prompt_tokens,
                text_ids,
                options["exaggeration"],
                options["cfg_weight"],
                n,
            )
            assert got == want, options
            wanted.append(want)
    assert wanted[0] != wanted[1] and len(set(wanted[0])) > 3


async def test_the_bench_measures_the_baselines_throughput(baseline):
    """`voxgate bench --baseline-throughput` on it: a burst through the engine surface, the
    model's sampling defaults (generate()'s), min_tokens = max_tokens."""
    from voxbench.config import BenchConfig
    from voxbench.throughput import measure_rtf
    from voxbench.workload import burst_plan, load_workload

    items = load_workload(BenchConfig(serve=True).workload, max_audio_seconds=0.5)
    plan = burst_plan(items, 2, baseline.facts.token_rate_hz)
    result = await measure_rtf(baseline, plan, warmup=0)
    assert result["requests"] == 2 and result["finish"] == {"length": 2}
    asked = sum(p.tokens for p in plan) * SAMPLES_PER_TOKEN / SAMPLE_RATE
    assert result["audio_s"] == pytest.approx(asked, abs=1e-3)


async def test_the_baseline_cancels_and_refuses_bad_input(baseline):
    await assert_refuses_an_unknown_voice_and_blank_text(baseline)
    with pytest.raises(ModelInputError, match="cfg_weight"):
        await baseline.submit(SpeechRequest("hi", model_options={"cfg_weight": 3.0}))
    with pytest.raises(ModelInputError, match="unknown model option"):
        await baseline.submit(SpeechRequest("hi", model_options={"speed": 1.0}))
    with pytest.raises(ModelInputError, match="context"):
        await baseline.submit(SpeechRequest("hi", sampling=tokens(6180)))
    assert not baseline.facts.voice_cloning
    await assert_cancels_a_running_request(baseline, tokens(2000))
