"""The HF baseline: Orpheus's reference chunking, the audio-token constraint, and the engine
surface the gateway drives (submit, stream, cancel, stats) on tiny-orpheus."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from baseline_testkit import assert_cancels_a_running_request

from engine.api import AudioChunk, Finished, FinishReason, SamplingParams, SpeechRequest
from models.orpheus import tokens as T
from voxbench.baselines import load_baseline
from voxbench.config import BenchConfig
from voxbench.hf_baseline import baseline_facts
from voxbench.orpheus_reference import (
    AudioTokenMask,
    ReferenceStreamer,
    snac_reference_decoder,
)


def audio_tokens(n: int, start: int = 0) -> list[int]:
    """n valid Orpheus audio tokens, positions start, start+1, … (code = position index)."""
    return [T.audio_range(p)[0] + (p % 50) for p in range(start, start + n)]


def test_reference_streamer_decodes_every_7_tokens_once_28_exist():
    windows: list[list[int]] = []
    emitted: list[np.ndarray] = []
    streamer = ReferenceStreamer(
        lambda codes: windows.append(list(codes)) or np.zeros(2048), emitted.append
    )
    streamer.put(torch.tensor([[T.START_OF_HUMAN, 1, 2, T.START_OF_SPEECH]]))  # the prompt: skipped
    tokens = audio_tokens(27)
    for tok in tokens:
        streamer.put(torch.tensor([tok]))
    assert windows == []
    streamer.put(
        torch.tensor([T.BEGIN_OF_TEXT])
    )  # not an audio token: skipped, as the reference does
    streamer.put(torch.tensor([audio_tokens(1, 27)[0]]))
    assert len(windows) == 1 and len(windows[0]) == 28
    for tok in audio_tokens(14, 28):
        streamer.put(torch.tensor([tok]))
    assert len(windows) == 3 and len(emitted) == 3
    assert windows[-1] == streamer.codes[-28:]
    assert streamer.codes[:7] == [p % 50 for p in range(7)]


def test_audio_token_mask_keeps_the_position_range_and_stop_at_frame_boundaries():
    mask = AudioTokenMask(prompt_len=5, min_tokens=14)
    scores = torch.randn(1, T.VOCAB_SIZE)
    for generated in (0, 3, 7, 14, 15):
        out = mask(torch.zeros(1, 5 + generated, dtype=torch.long), scores.clone())
        finite = torch.isfinite(out[0]).nonzero().flatten().tolist()
        lo, hi = T.audio_range(generated)
        stop_ok = generated >= 14 and generated % 7 == 0
        assert finite == ([T.END_OF_SPEECH] if stop_ok else []) + list(range(lo, hi))
        assert torch.equal(out[0, lo:hi], scores[0, lo:hi])


def test_reference_decoder_keeps_the_second_of_four_frames(tiny_orpheus_dirs):
    from models.codecs.snac_checkpoint import load_snac

    snac = load_snac(str(tiny_orpheus_dirs[1]))
    codes = [(7 * f + i) % 4096 for f in range(4) for i in range(7)]
    audio = snac_reference_decoder(snac, torch.device("cpu"))(codes)
    frames = [codes[7 * f : 7 * f + 7] for f in range(4)]
    levels = [
        torch.tensor([[f[0] for f in frames]]),
        torch.tensor([[c for f in frames for c in (f[1], f[4])]]),
        torch.tensor([[c for f in frames for c in (f[2], f[3], f[5], f[6])]]),
    ]
    with torch.inference_mode():
        whole = snac.decode(levels)[0, 0].numpy()
    assert audio.shape == (2048,)
    np.testing.assert_allclose(audio, whole[2048:4096], rtol=1e-5, atol=1e-6)


def test_baseline_facts_match_the_engine_model(tiny_orpheus_dirs):
    from models.registry import load_model

    facts = load_model("tiny-orpheus").facts
    ours = baseline_facts("tiny-orpheus")
    assert ours.token_rate_hz == pytest.approx(facts.token_rate_hz)
    assert ours.sampling_defaults == facts.sampling_defaults
    assert ours.voices == facts.voices and ours.default_voice == facts.default_voice
    assert ours.sample_rate == facts.sample_rate


@pytest.fixture(scope="module")
def baseline(tiny_orpheus_dirs):
    b = load_baseline("tiny-orpheus", "cpu")
    yield b
    asyncio.run(b.shutdown())


def _sampling(tokens: int) -> SamplingParams:
    return SamplingParams(
        temperature=0.6, top_p=0.8, repetition_penalty=1.3, min_tokens=tokens, max_tokens=tokens
    )


async def test_baseline_serves_one_request_at_a_time_and_cancels(baseline):
    first = await baseline.submit(
        SpeechRequest("Hello there.", sampling=_sampling(42), request_id="a")
    )
    queued = await baseline.submit(
        SpeechRequest("And you?", sampling=_sampling(42), request_id="b")
    )
    assert baseline.stats().waiting + baseline.stats().running == 2
    baseline.cancel("b")  # still queued: finished at once, never generated
    event = await asyncio.wait_for(queued.get(), 5)
    assert (
        isinstance(event, Finished)
        and event.reason is FinishReason.CANCELLED
        and event.num_tokens == 0
    )
    samples, finished = 0, None
    async for event in first:
        if isinstance(event, AudioChunk):
            samples += len(event.pcm)
        else:
            finished = event
    # 42 tokens = 6 frames; the reference scheme emits one frame per 7 tokens from the 28th on.
    assert finished.reason is FinishReason.LENGTH and finished.num_tokens == 42
    assert samples == (6 - 3) * 2048
    await assert_cancels_a_running_request(baseline, _sampling(2000))


async def test_baseline_refuses_bad_input(baseline):
    from models.base import ModelInputError

    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("hi", voice="nobody"))
    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("   "))


async def test_baseline_throughput_through_the_engine_surface(baseline):
    from voxbench.throughput import measure_rtf
    from voxbench.workload import burst_plan, load_workload

    items = load_workload(BenchConfig(serve=True).workload, max_audio_seconds=0.5)
    result = await measure_rtf(
        baseline, burst_plan(items, 2, baseline.facts.token_rate_hz), warmup=0
    )
    assert result["requests"] == 2 and result["finish"] == {"length": 2}
    assert result["audio_s"] == pytest.approx(2 * (5 - 3) * 2048 / 24000, abs=1e-3)  # 5 frames
    assert result["rtf"] == pytest.approx(result["audio_s"] / result["wall_s"], rel=1e-2)
