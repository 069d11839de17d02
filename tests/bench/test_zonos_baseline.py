"""The Zonos v0.1 per-request baseline (voxbench/zonos_baseline.py) on tiny-zonos: transformers'
StableLM over both CFG rows token by token, the package's generate() rules, one DAC decode at
the end, behind the engine surface the gateway drives. Its greedy codes equal the engine's and
(where `make reference-deps` fetched it) the official package's."""

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
from models.checkpoint_errors import CheckpointError
from models.zonos import rows as R
from models.zonos.phonemes import espeak_available
from tests.torch_threads import one_torch_thread
from voxbench import zonos_reference as Z
from voxbench.baselines import baseline_family, load_baseline

pytestmark = pytest.mark.skipif(
    not espeak_available(),
    reason="Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`",
)
TEXT = "Hello, world!"
HOP = 512  # samples a DAC frame


@pytest.fixture(scope="module")
def baseline():
    with one_torch_thread():  # tiny matrices: a second thread only adds contention
        b = load_baseline("tiny-zonos", "cpu")
        yield b
        asyncio.run(b.shutdown())


def greedy(frames: int, min_tokens: int | None = None) -> SamplingParams:
    return SamplingParams(
        temperature=0.0,
        repetition_penalty=1.0,
        min_tokens=frames if min_tokens is None else min_tokens,
        max_tokens=frames,
    )


async def test_a_request_is_one_decode_of_its_frames_at_the_end(baseline):
    # 30 grid frames: 22 audio frames (the last 8 grid frames complete the delay), decoded once.
    chunks, finished = await audio_of(baseline, SpeechRequest(TEXT, sampling=greedy(30)))
    assert finished.reason is FinishReason.LENGTH and finished.num_tokens == 30
    assert len(chunks) == 1 and len(chunks[0]) == (30 - R.N_CODEBOOKS + 1) * HOP
    assert np.isfinite(chunks[0]).all() and np.abs(chunks[0]).max() > 0

    async def sampled(seed: int) -> np.ndarray:
        sampling = SamplingParams(
            temperature=1.0, top_p=1.0, seed=seed, min_tokens=20, max_tokens=20
        )
        chunks, _ = await audio_of(baseline, SpeechRequest(TEXT, sampling=sampling))
        return np.concatenate(chunks)

    first, same, other = await sampled(1), await sampled(1), await sampled(2)
    np.testing.assert_array_equal(first, same)  # a seed fixes the draw
    assert not np.array_equal(first, other)


def test_the_baselines_greedy_grid_is_the_engines(baseline):
    """The same checkpoint through the engine (its own backbone on the paged KV, both CFG rows
    stacked) and through the baseline (transformers' StableLM, a batch of two): the same greedy
    delayed grid. The baseline asks for 8 frames more, so its first 20 frames are all drawn
    (its last 8 hold the grid's tail masks, which the engine's grid has not)."""
    from engine.config import EngineConfig
    from engine.core import EngineCore

    frames = 20
    with one_torch_thread():
        core = EngineCore(baseline.model, EngineConfig(device="cpu"), torch.device("cpu"), "sdpa")
        req = core.add_request(SpeechRequest(TEXT, sampling=greedy(frames)))
        while core.has_work():
            core.step()
        engine_grid = torch.tensor([row[: R.N_CODEBOOKS] for row in req.output_ids]).T
        out = baseline.delayed_codes(baseline.prompt_ids(TEXT, None), greedy(frames + 8))
    assert out.reason is FinishReason.LENGTH and out.frames == frames + 8
    assert engine_grid.shape == (R.N_CODEBOOKS, frames)
    assert torch.equal(out.grid[:, 1 : frames + 1], engine_grid)


def test_the_baselines_greedy_codes_and_audio_are_the_packages(baseline):
    """Against the official generate() (tests/models/official_zonos.py; skipped without it):
    the whole grid's drawn frames, the audio codes it returns (the grid's tail included) and
    the decode of them."""
    from models.zonos.presets import ensure_tiny_zonos
    from tests.models.official_zonos import official_greedy_grid, official_model

    folder = ensure_tiny_zonos() / "model"
    frames = 16  # generate()'s max_new_tokens: 16 audio frames, 24 grid frames
    with one_torch_thread():
        reference = official_model(folder, folder / "dac")
        want_grid, want_codes = official_greedy_grid(reference, TEXT, frames)
        out = baseline.delayed_codes(baseline.prompt_ids(TEXT, None), greedy(frames + 8, 0))
        codes = Z.audio_codes(out.grid, out.frames)
        with torch.inference_mode():
            want_audio = reference.autoencoder.decode(want_codes[None])[0, 0].numpy()
        audio = baseline.decode(codes)
    assert torch.equal(out.grid[:, 1 : frames + 1], want_grid)
    assert torch.equal(codes, want_codes)
    np.testing.assert_allclose(audio, want_audio, atol=1e-5)


def test_the_eos_cascade_ends_the_request_and_its_audio():
    """EOS in codebook 0 at grid frame s: frames s+1..s+8 move it down the codebooks (masks
    before it), the request ends with frame s+8, and its audio is the s-1 frames before."""
    grid = Z.delayed_grid(20, torch.device("cpu"))
    for frame in range(1, 15):
        Z.fill_frame(grid, frame, torch.full((R.N_CODEBOOKS,), frame))
    grid[0, 6] = R.EOS_CODE
    codes = Z.audio_codes(grid, 14)
    assert codes.shape == (R.N_CODEBOOKS, 5)
    assert codes[:, 0].tolist() == list(range(1, 10))  # audio frame 0: codebook k in frame k+1


def test_the_tail_fills_as_the_package_does():
    """The grid's last frames: codebook 0 is mask, so a draw fills from codebook 1 on with the
    draw's first codes (the package's masked_scatter_)."""
    grid = Z.delayed_grid(20, torch.device("cpu"))  # codebook k: codes in frames k+1..k+20
    Z.fill_frame(grid, 21, torch.arange(100, 109))
    assert grid[:, 21].tolist() == [R.MASK_CODE, *range(100, 108)]
    Z.fill_frame(grid, 22, torch.arange(200, 209))
    assert grid[:, 22].tolist() == [R.MASK_CODE, R.MASK_CODE, *range(200, 207)]


async def test_the_baseline_cancels_and_refuses_bad_input(baseline):
    await assert_refuses_an_unknown_voice_and_blank_text(baseline)
    await assert_cancels_a_running_request(baseline, greedy(2000))


def test_the_hybrid_is_refused_before_it_loads():
    assert baseline_family("tiny-zonos-hybrid") == "Zonos"
    with pytest.raises(CheckpointError, match="Zonos hybrid"):
        load_baseline("zonos-v0.1-hybrid", "cpu", random_weights=True)
