"""Chatterbox's streamed S3Gen (models/chatterbox/s3gen_stream.py) against the official package
(`make reference-deps`), fp32 on the CPU, and through the real engine.

What streaming is, exactly: the official flow has a streaming decode of its own,
`CausalMaskedDiffWithXvec.inference(finalize=False)` ("the last 3 tokens will be ignored"): the
encoder over every token so far, the look-ahead tokens' frames dropped, the estimator over
the rest. A streamed chunk's mel (with unbounded history) is that decode of the tokens so far,
and the last chunk's the final decode: compared exactly (float32 rounding) here, with weights
whose attention carries much of the signal. (Version 0.1.7's non-final decode fails on its own
mask, which it does not trim with the frames: the comparison trims both.)

What streaming is not: the whole decode. S3Gen attends over its whole input, so a streamed
chunk lacks the attention to tokens that came after its look-ahead; HiFT's seams (8 frames of
context each side) add to that. The streamed-vs-whole bound is CosyVoice 2's HiFT-seam bound
(tests/models/hift_seams.py) at the worst sample, 2 % RMS over the utterance, with the parity tests' weights (attention a small part of the
signal, as the gap's size for trained weights is not known here; HiFT's audio following its
mel); the gap of attention-heavy weights is shown to be real."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from official_chatterbox import noise_from
from official_s3gen import SIZES, official_and_ours, official_decode, voice
from torch import nn

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, SpeechRequest
from engine.request import SamplingParams
from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.s3gen import S3Gen
from models.chatterbox.s3gen_stream import S3GenStreamer
from tests.models.hift_seams import assert_within_seams
from tests.models.s3gen_pushes import S3GenPushLog


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 6561, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def stream(streamer: S3GenStreamer, codes: list[int], v, hop: int = 5):
    """Codes pushed `hop` at a time (the last push final) → (audio pieces, the generated mel
    [80, 2 * len(codes)] as the flow made it, before HiFT let go of what it vocoded)."""
    s = streamer.new_stream(v)
    made = []
    vocode = streamer.detok._hift_step

    def keep_mel(states, final):
        state = states[0]
        have = sum(m.shape[1] for m in made)
        if state.mel is not None and state.mel_frames > have:
            made.append(state.mel[:, have - state.mel_start :].clone())
        return vocode(states, final)

    streamer.detok._hift_step = keep_mel
    pieces = []
    for at in range(0, len(codes), hop):
        last = at + hop >= len(codes)
        pieces += streamer.decode([s], [codes[at : at + hop]], [last])
    return pieces, torch.cat(made, dim=1)


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    return official_and_ours(31, tmp_path_factory.mktemp("s3gen"))


@pytest.fixture(scope="module")
def attentive(tmp_path_factory):
    """Weights whose attention matters: unit layer norms and sharper queries and keys (the
    parity weights' attention carries under 1e-4 of the mel)."""
    (flow, hift), _, _ = official_and_ours(32, tmp_path_factory.mktemp("a"))
    with torch.no_grad():
        for module in flow.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
        for name, p in flow.named_parameters():
            if any(k in name for k in ("linear_q", "linear_k", "to_q", "to_k")):
                p.mul_(4.0)

    ours = S3Gen(SIZES)
    state = {f"flow.{k}": v for k, v in flow.state_dict().items()}
    state |= {f"mel2wav.{k}": v for k, v in hift.state_dict().items()}
    ours.load_state_dict(state)
    ours.mel2wav.fold_weight_norm()
    return flow, ours.eval()


class _Trimmed(nn.Module):
    """The official encoder, its last `frames` frames and their mask dropped: the non-final
    decode the official flow means (its own trims the frames but not the mask)."""

    def __init__(self, encoder: nn.Module, frames: int) -> None:
        super().__init__()
        self.inner, self.frames = encoder, frames

    def forward(self, *args, **kwargs):
        h, masks = self.inner(*args, **kwargs)
        return h[:, : -self.frames], masks[..., : -self.frames]


@contextmanager
def non_final(flow):
    encoder = flow.encoder
    flow.encoder = _Trimmed(encoder, flow.pre_lookahead_len * flow.token_mel_ratio)
    try:
        yield
    finally:
        flow.encoder = encoder


def official_mel(flow, codes, v, noise, final: bool) -> torch.Tensor:
    with torch.no_grad(), noise_from(noise):
        ctx = non_final(flow) if not final else torch.no_grad()
        with ctx:
            mel, _ = flow.inference(
                token=torch.tensor([codes]),
                token_len=torch.tensor([len(codes)]),
                prompt_token=v.prompt_tokens[None],
                prompt_token_len=torch.tensor([v.prompt_tokens.shape[0]]),
                prompt_feat=v.prompt_mel[None],
                prompt_feat_len=None,
                embedding=v.xvector[None],
                finalize=True,
                n_timesteps=10,
            )
    return mel[0]


def test_streamed_mel_is_the_official_streaming_decode_chunk_by_chunk(attentive):
    flow, ours = attentive
    v = voice(7, prompt_tokens=13)  # no chunk grid: any prompt length
    codes = tokens(56, 5)
    streamer = S3GenStreamer(ours, context_chunks=None)
    _, got = stream(streamer, codes, v)
    assert got.shape == (80, 2 * 56)
    # Chunk ends: the first hop (20), then every 25 tokens, then the end.
    start = 0
    for end in (20, 45, 56):
        final = end == 56
        want = official_mel(flow, codes[: end + (0 if final else 3)], v, ours.flow.noise, final)
        assert want.shape[1] == 2 * end
        torch.testing.assert_close(got[:, 2 * start : 2 * end], want[:, 2 * start :], **TIGHT)
        start = end
    # And the gap to the whole decode is real with these weights: streaming is not whole.
    whole = ours.mel(codes, v)
    assert (whole[:, :40] - got[:, :40]).abs().max() > 1e-2


TIGHT = {"atol": 1e-4, "rtol": 1e-4}


def test_bounded_history_equals_unbounded_until_the_window_is_full(attentive):
    """Two chunks of history besides the prompt: the first three chunks' rows hold every
    token before them, as with unbounded history."""
    _, ours = attentive
    v, codes = voice(8, prompt_tokens=10), tokens(95, 6)
    _, bounded = stream(S3GenStreamer(ours), codes, v)
    _, unbounded = stream(S3GenStreamer(ours, context_chunks=None), codes, v)
    exact = 2 * (20 + 2 * 25)  # first hop + two chunks
    torch.testing.assert_close(bounded[:, :exact], unbounded[:, :exact], **TIGHT)
    assert (bounded[:, exact:] - unbounded[:, exact:]).abs().max() > 1e-3  # then it departs


def test_streamed_audio_is_the_whole_decode_within_hift_seams(parity):
    (flow, hift), ours, _ = parity
    v, codes = voice(12, prompt_tokens=30), tokens(90, 1)
    _, whole = official_decode(flow, hift, codes, v, ours.flow.noise)
    pieces, _ = stream(S3GenStreamer(ours), codes, v)
    # Audio comes chunk by chunk, not at the end: the first once 20 + 3 tokens exist.
    sizes = [len(p) for p in pieces]
    first = next(i for i, n in enumerate(sizes) if n)
    assert first == 4  # pushes of 5: 25 tokens >= 23
    assert sum(1 for n in sizes if n) >= 3
    got = np.concatenate(pieces)
    assert got.shape == whole.shape == (90 * 2 * 480,)
    assert np.all(got[:480] == 0)  # the fade-in's silence, as whole
    assert_within_seams(got, whole, rms_bound=0.02)  # and the attention: measured 0.7 % RMS


def test_first_audio_comes_before_the_end_through_the_engine(tmp_path_factory, monkeypatch):
    """tiny-chatterbox through the engine: audio arrives while T3 still generates, and the
    utterance's audio is the streamer's of the codes the engine pushed (its preset's weights
    make audio that follows the tokens, so the streamed-vs-whole gap above is not its bound)."""
    model = ChatterboxModel(load_chatterbox(ensure_tiny_chatterbox(tmp_path_factory.mktemp("c"))))
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    pushes = S3GenPushLog(model, monkeypatch)
    n = 48
    params = SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n)
    req = core.add_request(SpeechRequest("Streaming speech, chunk by chunk.", None, params))
    audio, steps, first_audio_step = [], 0, None
    done = False
    while not done:
        steps += 1
        for event in core.step():
            if isinstance(event, AudioChunk) and len(event.pcm):
                audio.append(event.pcm)
                if first_audio_step is None:
                    first_audio_step = (steps, len(req.output_ids))
            elif isinstance(event, Finished):
                done = True
    assert first_audio_step is not None
    assert first_audio_step[1] < n  # before T3 was done
    codes = [row[0] - model.ids.speech_base for row in req.output_ids]
    codes = [c for c in codes if 0 <= c < 6561]
    alone = pushes.replay(model.parts.s3gen, model.parts.default_voice.s3gen, codes)
    got = np.concatenate(audio)
    assert got.shape == alone.shape == (len(codes) * 2 * 480,)
    np.testing.assert_array_equal(got, alone)
