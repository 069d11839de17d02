"""Chatterbox's S3Gen replayed from CUDA graphs (ChatterboxModel.enable_cuda_graphs, what the
engine's codec thread calls) against its eager decode, on the GPU: every voice prompt length
S3Gen takes (the default voice's, a short clip's, the longest clip's) replays captured buckets
and streams the eager audio; with the estimator's blocks compiled too (--compile-codec). T3's
guided forward with FlashInfer's fused kernels against the plain one (bf16).
tests/models/test_chatterbox_graphs.py checks the padding on the CPU.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from tests.gpu.markers import needs_flashinfer
from tests.models.test_chatterbox_graphs import streamed, voice_of

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("chatterbox"))


@pytest.mark.parametrize("compiled", [False, True])
def test_graphed_s3gen_streams_as_eager_on_the_gpu(folder, compiled, ieee_float32):
    eager = ChatterboxModel(load_chatterbox(folder, "cuda"))
    graphed = ChatterboxModel(load_chatterbox(folder, "cuda"))
    graphed.enable_cuda_graphs(CallableGraphs(CUDA, paced=True, compiled=compiled))
    lengths = [len(eager.voices["default"].s3gen.prompt_tokens), 37, 250]
    voices = [voice_of(eager, n, 3 + i) for i, n in enumerate(lengths)]
    want = streamed(eager, [eager.stream_state_for({"voice": v}) for v in voices], 7)
    got = streamed(graphed, [graphed.stream_state_for({"voice": v}) for v in voices], 7)
    assert not graphed.streamer.detok.eager_calls
    for a, b in zip(want, got, strict=True):
        assert len(a) == len(b)
        # IEEE float32 on both sides (ieee_float32); the captured shapes may still pick other
        # kernels, so a tolerance on the signal's scale, not bit-exact.
        np.testing.assert_allclose(b, a, atol=1e-4 * max(1.0, float(np.abs(a).max())))


@needs_flashinfer
def test_t3_with_flashinfers_fused_kernels_matches_the_plain_forward(folder):
    from models.csm.depth import FrameAttention

    model = ChatterboxModel(load_chatterbox(folder, "cuda", torch.bfloat16))
    a = model.t3.backbone.args
    ids = torch.tensor(model.preprocess("Hello there, a test.", None).token_ids, device=CUDA)
    t = ids.shape[0]
    hidden = []
    for fused in (False, True):
        if fused:
            assert model.use_fused_kernels()
        attn = FrameAttention(a.num_layers, t, 2 * a.num_kv_heads, a.head_dim)
        attn.begin(1, CUDA, torch.bfloat16)
        attn.at(0, t)
        with torch.inference_mode():
            hidden.append(model.forward(ids, torch.arange(t, device=CUDA), attn).float())
    plain, fused_out = hidden
    assert ((fused_out - plain).norm() / plain.norm()).item() < 2e-2
