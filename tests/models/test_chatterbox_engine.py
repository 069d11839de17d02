"""Chatterbox through the engine (four stages, paged KV, batched requests) against the offline
reference decode (t3_decode.py, itself equal to the official T3 in test_chatterbox_t3.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.t3_decode import T3Request, generate_speech_tokens
from tests.models.engine_run import run
from tests.models.s3gen_pushes import S3GenPushLog

TEXTS = ["Hello there.", "A second, longer sentence to say.", "Third one!", "Four."]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return load_chatterbox(ensure_tiny_chatterbox(tmp_path_factory.mktemp("c")))


@pytest.fixture(scope="module")
def model(parts):
    """Sampling the whole speech head, as the reference decode (and the official T3) does."""
    return ChatterboxModel(parts, constrain_codes=False)


def test_served_sampling_draws_only_what_s3gen_decodes(parts, model):
    """By default (random weights put a fifth of the head's mass on rows S3Gen cannot decode)
    every token is a speech code or the stop, so a chunk of N tokens is N tokens of audio, as
    the engine counts; sampling the whole head draws start and unused rows too."""
    served = ChatterboxModel(parts)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=60, min_tokens=60, seed=3)
    for chatterbox, undecodable in ((served, False), (model, True)):
        core = EngineCore(chatterbox, EngineConfig(num_kv_blocks=64), torch.device("cpu"), "sdpa")
        requests, _, _, _ = run(core, [SpeechRequest(t, None, params) for t in TEXTS[:2]])
        codes = [chatterbox.ids.code_of(row[0]) for r in requests for row in r.output_ids]
        assert (None in codes) == undecodable


def test_batched_greedy_tokens_equal_the_reference_decode(model, monkeypatch):
    config = EngineConfig(max_num_seqs=8, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    pushes = S3GenPushLog(model, monkeypatch)
    n = 24
    params = SamplingParams(temperature=0.0, repetition_penalty=1.2, max_tokens=n)
    requests, audio, _, peak = run(core, [SpeechRequest(t, None, params) for t in TEXTS])
    assert peak == 4
    voice = model.parts.default_voice
    for req, text in zip(requests, TEXTS, strict=True):
        ask = T3Request(
            model.parts.tokenizer.text_ids(text),
            voice.t3.speaker,
            voice.t3.prompt_tokens,
            voice.t3.exaggeration,
            n,
        )
        want = generate_speech_tokens(model.t3, ask, T3Sampling(greedy=True))
        got = [row[0] - model.ids.speech_base for row in req.output_ids if not model.is_stop(row)]
        assert got == want, req.request_id
        assert [row[1] for row in req.output_ids] == list(range(1, len(req.output_ids) + 1))
        codes = [c for c in want if c < 6561]
        pcm = np.concatenate(audio[req.request_id])
        # Batched with the others, the audio is the streamer's of this request's codes alone
        # (within fp32 rounding: a batch's sums run in another order).
        alone = pushes.replay(model.parts.s3gen, voice.s3gen, codes)
        assert pcm.shape == alone.shape == (len(codes) * 2 * 480,)
        np.testing.assert_allclose(pcm, alone, atol=1e-4 * np.sqrt(np.mean(alone**2)))
    assert core.blocks.num_used == 0


def test_kv_cache_holds_both_cfg_rows(model):
    sizes = model.t3.sizes
    assert model.shape.num_kv_heads == 2 * sizes.kv_heads
    assert model.shape.num_q_heads == 2 * sizes.heads
    assert model.facts.row_width == 2


def test_bad_requests_get_clear_errors(model):
    with pytest.raises(ModelInputError, match="unknown voice"):
        model.preprocess("Hi.", "nobody")
    with pytest.raises(ModelInputError, match="empty"):
        model.preprocess("   ", None)


def test_first_chunks_on_the_lane_stream_the_streamers_audio(model, monkeypatch):
    # The GPU's pipeline on the CPU: a threaded detokenizer with Chatterbox's first-chunk lane
    # (a twin of S3Gen's streamer). First chunks go out on the lane, the rest on the steady
    # detokenizer, and each request's audio is what S3Gen's streamer makes of its pushes alone.
    from engine.detok_threads import ThreadedDetokenizer

    config = EngineConfig(
        max_num_seqs=4,
        max_batch_tokens=256,
        num_kv_blocks=64,
        block_size=16,
        first_audio_margin=0.0,
    )
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    pushes = S3GenPushLog(model, monkeypatch)
    core.detok = ThreadedDetokenizer(
        model, core.clock, torch.device("cpu"), model.first_chunk_lane_codec()
    )
    n = 60  # a first chunk (23 tokens) and two steady ones
    params = SamplingParams(temperature=0.0, repetition_penalty=1.2, max_tokens=n, min_tokens=n)
    try:
        requests, audio, _, _ = run(core, [SpeechRequest(t, None, params) for t in TEXTS[:2]])
    finally:
        core.close()
    assert core.lane_jobs >= 1  # the first chunks (both requests start together: one job)
    voice = model.parts.default_voice
    for req in requests:
        codes = [row[0] - model.ids.speech_base for row in req.output_ids]
        codes = [c for c in codes if 0 <= c < 6561]
        alone = pushes.replay(model.parts.s3gen, voice.s3gen, codes)
        pcm = np.concatenate(audio[req.request_id])
        assert pcm.shape == alone.shape and len(pcm) > 0
        np.testing.assert_allclose(pcm, alone, atol=1e-4 * np.sqrt(np.mean(alone**2)))
