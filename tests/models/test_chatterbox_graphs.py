"""Chatterbox on the GPU's paths, run on the CPU: S3Gen's flow rows padded to the captured
(rows, frames) buckets, as a replay runs them (EagerGraphs), must stream every voice's audio as
the eager decode does, whatever its prompt's length; a stream begun on the first-chunk lane's
twin detokenizer must go on on the steady one as if it had never moved; T3's guided forward
with the fused kernels (their contract in torch) must equal the plain one.
tests/gpu/test_chatterbox_graphs_gpu.py checks the real replays and kernels on a GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.model import ChatterboxModel, ChatterboxStream
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.s3gen import S3GenVoice
from models.codecs.flow_hift.lane import FlowHiftLane
from models.csm.depth import FrameAttention
from tests.cpu_graphs import EagerGraphs
from tests.models.torch_llama_kernels import TorchLlamaKernels, fused_with

# A first chunk (20 tokens and the 3 of look-ahead), a steady chunk, then the rest, final.
PUSHES = (23, 25, 9)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("chatterbox"))


@pytest.fixture(scope="module")
def eager(folder) -> ChatterboxModel:
    return ChatterboxModel(load_chatterbox(folder))


@pytest.fixture(scope="module")
def graphed(folder) -> tuple[ChatterboxModel, EagerGraphs]:
    model = ChatterboxModel(load_chatterbox(folder))
    graphs = EagerGraphs(deferred=True)
    model.enable_cuda_graphs(graphs)
    return model, graphs


def voice_of(model: ChatterboxModel, prompt_tokens: int, seed: int):
    """The default voice with an S3Gen prompt of `prompt_tokens` tokens (a client's clip of
    that length, as S3Gen sees it)."""
    g = torch.Generator().manual_seed(seed)
    s3gen = S3GenVoice(
        torch.randint(0, 6561, (prompt_tokens,), generator=g),
        torch.randn(2 * prompt_tokens, 80, generator=g),
        torch.randn(192, generator=g),
    )
    return dataclasses.replace(model.voices["default"], s3gen=s3gen)


def speech_rows(model: ChatterboxModel, n: int, seed: int) -> list[tuple[int, int]]:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 6561, (n,), generator=g).tolist()
    return [(model.ids.speech(c), i + 1) for i, c in enumerate(codes)]


def streamed(model, states, seed: int, decoders=None) -> list[np.ndarray]:
    """Each state's audio when PUSHES tokens at a time are decoded in one batch per push;
    `decoders[i]`, when given, decodes push i (the model's own detokenize otherwise)."""
    rows = speech_rows(model, sum(PUSHES), seed)
    out: list[list[np.ndarray]] = [[] for _ in states]
    at = 0
    for i, size in enumerate(PUSHES):
        final = i == len(PUSHES) - 1
        decode = decoders[i] if decoders else model.detokenize
        pieces = decode(states, [rows[at : at + size]] * len(states), [final] * len(states))
        for mine, piece in zip(out, pieces, strict=True):
            mine.append(piece)
        at += size
    return [np.concatenate(pieces) for pieces in out]


def test_graphed_s3gen_streams_every_voice_as_eager(eager, graphed):
    # A short client clip's prompt (not whole flow chunks) and the longest S3Gen takes from a
    # clip (10 s), batched: each pads up to a captured bucket, none runs eagerly, and each
    # stream's audio is the eager decode's.
    model, graphs = graphed
    lengths = [37, 250]
    voices = [voice_of(eager, n, 3 + i) for i, n in enumerate(lengths)]
    want = streamed(eager, [eager.stream_state_for({"voice": v}) for v in voices], 7)
    got = streamed(model, [model.stream_state_for({"voice": v}) for v in voices], 7)
    for a, b in zip(want, got, strict=True):
        assert len(a) == len(b) and np.abs(a).max() > 1e-3
        np.testing.assert_allclose(b, a, atol=1e-5)
    assert not model.streamer.detok.eager_calls
    used = {key for key in graphs.shapes if key[0] == "prep"}
    assert used and all(rows == 2 for _, rows, _ in used)


def test_a_voice_past_the_covered_prompts_is_told_and_runs_eagerly(graphed, caplog):
    # A longer S3Gen prompt than any clip gives (a hand-made conds.pt): its windows are past
    # the captured buckets; the model says so when it meets it, and its jobs run eagerly.
    model, _ = graphed
    detok = model.streamer.detok
    too_long = (detok.MAX_GRAPH_PROMPT_CHUNKS + 1) * detok.chunk
    model._cover_prompt("huge", too_long)
    assert "past the 300 the CUDA graphs cover" in caplog.text
    state = model.stream_state_for({"voice": voice_of(model, too_long, 11)})
    model.detokenize([state], [speech_rows(model, 23, 12)], [False])
    assert any(stage == "flow" for stage, *_ in detok.eager_calls)
    detok.eager_calls.clear()


def test_a_stream_begun_on_the_lane_goes_on_on_the_steady_detokenizer(eager):
    # Chatterbox serves with a first-chunk lane: the first chunk decoded on the lane's twin,
    # the rest on the model's own detokenizer, is the audio all on one (the fade-in counted
    # once over what the stream emitted, wherever it was decoded).
    lane = eager.first_chunk_lane_codec()
    assert isinstance(lane, FlowHiftLane) and lane.detok is not eager.streamer.detok
    assert eager.facts.first_chunk_lane and lane.max_rows == FlowHiftLane.GRAPH_ROWS[-1]
    voice = eager.voices["default"]
    (whole,) = streamed(eager, [eager.stream_state_for({"voice": voice})], 21)
    state = eager.stream_state_for({"voice": voice})
    assert isinstance(state, ChatterboxStream)
    moved = streamed(eager, [state], 21, [lane.detokenize, eager.detokenize, eager.detokenize])
    np.testing.assert_array_equal(moved[0], whole)
    lane.hand_over([state], None)  # finds the state's flow (CPU tensors: nothing to record)


def test_t3_with_the_fused_kernels_equals_the_plain_guided_forward(eager):
    # What use_fused_kernels switches on beside FlashInfer attention on a GPU, with the fused
    # kernels' contract in torch: both CFG rows' hidden states as the plain guided forward's.
    backbone = eager.t3.backbone
    a = backbone.args
    prompt = eager.preprocess("Hello there, a test.", None)
    ids = torch.tensor(prompt.token_ids)
    t = ids.shape[0]
    positions = torch.arange(t)
    hidden = []
    for kernels in (None, TorchLlamaKernels(backbone.rotary, a.head_dim)):
        attn = FrameAttention(a.num_layers, t, 2 * a.num_kv_heads, a.head_dim)
        attn.begin(1, ids.device, torch.float32)
        attn.at(0, t)
        with fused_with(eager, "_kernels", kernels):
            hidden.append(eager.forward(ids, positions, attn))
    assert hidden[0].shape == (t, 2 * a.hidden_size)
    torch.testing.assert_close(hidden[1], hidden[0], atol=1e-5, rtol=1e-5)


def test_arrivals_from_the_prompt_graphs_change_nothing(folder):
    """T3's prompts replay from the prompt graphs (their CFG rows side by side, each request's
    exaggeration in its emotion row) beside decodes, the CFG mix with each request's options
    sampled after them: the same tokens and audio as eager forwards."""
    from engine.config import EngineConfig
    from engine.outputs import SpeechRequest
    from engine.request import SamplingParams
    from models.chatterbox.family import FAMILY
    from models.registry import with_request_options
    from tests.models.engine_run import assert_row_prompt_graphs_change_nothing

    model = with_request_options(ChatterboxModel(load_chatterbox(folder)), FAMILY)
    assert model.prompt_graphs_sample_eagerly()
    texts = ["Hello there.", "A longer sentence to say now.", "Third!", "And a fourth."]
    options = [{"exaggeration": 1.7, "cfg_weight": 0.0}, {"exaggeration": 0.2}, {}, {}]
    specs = [
        SpeechRequest(
            text,
            sampling=SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n)
            if i % 2
            else SamplingParams(temperature=0.8, top_p=0.95, seed=i, max_tokens=n, min_tokens=n),
            model_options=o,
        )
        for i, (text, o, n) in enumerate(zip(texts, options, [30, 26, 28, 24], strict=True))
    ]
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=512, num_kv_blocks=128)
    assert_row_prompt_graphs_change_nothing(model, specs, config)
