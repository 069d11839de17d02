"""Chatterbox's S3Gen flow in bfloat16 on the GPU, as it serves on CUDA (the model's --dtype,
as CosyVoice 2's flow; `--flow-float32` keeps it in float32; HiFT is float32 either way): the
same random-weight chunks streamed with the bf16 flow and with the float32 one (IEEE, not
TF32) stay within MAX_AUDIO_ERROR of each other, at the tiny size and the real one; and the
bf16 flow's CUDA graphs replay as its eager calls, each graph on its own inputs and the
streamed audio at the padded buckets, with the estimator's blocks compiled too (served:
--compile-codec). tests/models/test_chatterbox_bf16.py covers the path on the CPU.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.chatterbox.checkpoint import load_chatterbox, seeded_s3gen
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.s3gen import REAL_S3GEN, S3Gen, S3GenVoice
from models.chatterbox.s3gen_stream import S3GenStreamer
from tests.gpu.graph_compare import ComparedGraphs
from tests.models.test_chatterbox_bf16 import relative_rms
from tests.models.test_chatterbox_graphs import streamed, voice_of

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")

# Relative RMS of each stream's audio, the bf16 flow against IEEE float32. bf16 keeps 8
# significant bits (rounding 2^-9, 0.2 %), each layer of the flow rounds its output and the 10
# Euler steps accumulate the mel in bf16. On the CPU, with these seeded weights, that moved the
# audio by 0.7 % at the real size and 1.3-1.4 % at the tiny one; the GPU's bf16 GEMMs and
# convolutions accumulate in float32 as the CPU's do, so its error should be of that order. 3 %
# leaves room for other kernels' summation order and still fails HiFT run in bf16 (3.9 % at
# the tiny size) or a lost voice prompt (9 %). Graphs against eager, both bf16: they differ
# only where a padded bucket's kernels sum in another order, never by more than bf16's own
# rounding moves the audio, so the same bound.
MAX_AUDIO_ERROR = 0.03
# A first chunk (20 tokens and the 3 of look-ahead), two steady chunks, the final rest.
PUSHES = (23, 25, 25, 9)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("chatterbox"))


def real_s3gen() -> S3Gen:
    """The real S3Gen's shapes with the seeded weights `chatterbox --random-weights` has."""
    s3gen = seeded_s3gen(REAL_S3GEN, 1)
    s3gen.mel2wav.fold_weight_norm()
    return s3gen.to(CUDA).eval()


def random_voice(prompt_tokens: int, seed: int) -> S3GenVoice:
    g = torch.Generator().manual_seed(seed)
    return S3GenVoice(
        torch.randint(0, 6561, (prompt_tokens,), generator=g),
        torch.randn(2 * prompt_tokens, 80, generator=g),
        torch.randn(192, generator=g),
    )


def stream_voices(s3gen: S3Gen, voices: list[S3GenVoice], seed: int) -> list[np.ndarray]:
    """Each voice's audio when PUSHES seeded random codes at a time are decoded, the voices'
    streams in one batch per push (eagerly)."""
    streamer = S3GenStreamer(s3gen)
    streams = [streamer.new_stream(v) for v in voices]
    g = torch.Generator().manual_seed(seed)
    out: list[list[np.ndarray]] = [[] for _ in voices]
    for i, size in enumerate(PUSHES):
        codes = [torch.randint(0, 6561, (size,), generator=g).tolist() for _ in voices]
        final = [i == len(PUSHES) - 1] * len(voices)
        for mine, piece in zip(out, streamer.decode(streams, codes, final), strict=True):
            mine.append(piece)
    return [np.concatenate(pieces) for pieces in out]


@pytest.mark.parametrize("size", ["tiny", "real"])
def test_bf16_flow_streams_close_to_float32(folder, size, ieee_float32):
    exact = load_chatterbox(folder, "cuda").s3gen if size == "tiny" else real_s3gen()
    bf16 = copy.deepcopy(exact)
    bf16.flow.to(torch.bfloat16)
    # The tiny preset's voice prompt length, a short clip's (not whole chunks), the longest
    # S3Gen takes from a clip (10 s).
    voices = [random_voice(n, 3 + i) for i, n in enumerate([50, 37, 250])]
    want, got = stream_voices(exact, voices, 7), stream_voices(bf16, voices, 7)
    for a, b in zip(want, got, strict=True):
        assert len(a) == len(b) and np.abs(a).max() > 1e-3
        error = relative_rms(b, a)
        assert error < MAX_AUDIO_ERROR, f"relative RMS error {error:.4f}"


@pytest.mark.parametrize("compiled", [False, True])
def test_bf16_flow_graphs_replay_as_eager(folder, compiled):
    eager = ChatterboxModel(load_chatterbox(folder, "cuda", flow_dtype=torch.bfloat16))
    graphed = ChatterboxModel(load_chatterbox(folder, "cuda", flow_dtype=torch.bfloat16))
    assert graphed.streamer.detok.dtype == torch.bfloat16
    # Compiling is in place, so a compiled graph's eager twin would be compiled too: the
    # graph-by-graph comparison runs uncompiled, the streamed one both ways.
    graphs = CallableGraphs(CUDA, paced=True, compiled=True) if compiled else ComparedGraphs(CUDA)
    graphed.enable_cuda_graphs(graphs)
    lengths = [len(eager.voices["default"].s3gen.prompt_tokens), 37, 250]
    voices = [voice_of(eager, n, 3 + i) for i, n in enumerate(lengths)]
    want = streamed(eager, [eager.stream_state_for({"voice": v}) for v in voices], 7)
    got = streamed(graphed, [graphed.stream_state_for({"voice": v}) for v in voices], 7)
    assert not graphed.streamer.detok.eager_calls
    for a, b in zip(want, got, strict=True):
        assert len(a) == len(b) and np.abs(a).max() > 1e-3
        error = relative_rms(b, a)
        assert error < MAX_AUDIO_ERROR, f"relative RMS error {error:.4f}"
    if isinstance(graphs, ComparedGraphs):
        # The same inputs at the same shapes: the replay is the eager call, to bf16 rounding.
        assert {key[0] for key, *_ in graphs.compared} == {"prep", "euler", "hift"}
        for key, replayed, eager_out in graphs.compared:
            torch.testing.assert_close(
                replayed.float(),
                eager_out.float(),
                atol=1e-2,
                rtol=1.6e-2,
                msg=lambda m, k=key: f"{k}: {m}",
            )
