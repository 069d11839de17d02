"""CosyVoice 2's detokenizer in CUDA graphs: each captured graph's replay equals the eager call
on the same inputs, and a graphed stream's audio equals the eager one's.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from tests.gpu.graph_compare import ComparedGraphs, random_streams

# Graphs against eager in IEEE float32 (ieee_float32): captured at padded shapes they may pick
# other kernels, whose TF32 rounding would differ (served, the flow runs in TF32).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ieee_float32")]
CUDA = torch.device("cuda")


def stream(detok, requests: int, pushes: list[int], prompt_chunks: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    states = random_streams(detok, requests, g, prompt_chunks)
    pieces = [[] for _ in states]
    for step, size in enumerate([*pushes, 0]):
        for s in states:
            detok.push(s, torch.randint(0, 6561, (size,), generator=g).tolist())
        for i, audio in enumerate(detok.decode(states, [step == len(pushes)] * requests)):
            pieces[i].append(torch.from_numpy(audio))
    return [torch.cat(p) for p in pieces]


@pytest.mark.parametrize("first_hop", [7, 20])
def test_each_detokenizer_graph_replays_as_eager(parts, first_hop):
    flow, hift, chunk = parts
    detok = FlowHiftDetokenizer(flow, hift, chunk, first_hop=first_hop)
    graphs = ComparedGraphs(CUDA)
    detok.enable_cuda_graphs(graphs)
    stream(detok, 3, [first_hop + 3, 25, 25, 25])
    kinds = {key[0] for key, *_ in graphs.compared}
    assert kinds == {"prep", "euler", "hift"}
    for key, replayed, eager in graphs.compared:
        torch.testing.assert_close(
            replayed, eager, atol=1e-4, rtol=1e-4, msg=lambda m, k=key: f"{k}: {m}"
        )


@pytest.mark.parametrize(
    "first_hop,paced,compiled",
    [(7, False, False), (20, False, False), (20, True, False), (20, True, True)],
)
def test_graphed_stream_equals_eager_stream(parts, first_hop, paced, compiled):
    """paced: the codec thread waits after each Euler step's graph (--codec-pacing);
    compiled: the estimator's blocks compiled before capture (--compile-codec), on a copy of
    the flow, since compiling is in place and the eager side must stay eager."""
    flow, hift, chunk = parts
    eager = FlowHiftDetokenizer(flow, hift, chunk, first_hop=first_hop)
    graphed_flow = copy.deepcopy(flow) if compiled else flow
    graphed = FlowHiftDetokenizer(graphed_flow, hift, chunk, first_hop=first_hop)
    graphed.enable_cuda_graphs(CallableGraphs(CUDA, paced=paced, compiled=compiled))
    pushes = [first_hop + 3, 25, 25, 30, 10]
    for a, b in zip(stream(eager, 5, pushes), stream(graphed, 5, pushes), strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_a_long_voice_prompt_replays_its_covered_buckets(parts):
    """A voice prompt of 6 chunks (a 6 s clip), past the default buckets: covered
    (cover_prompt, what CosyVoice2Model.add_voice calls), its flow jobs replay graphs, with
    the eager stream's audio."""
    flow, hift, chunk = parts
    eager = FlowHiftDetokenizer(flow, hift, chunk, first_hop=20)
    graphed = FlowHiftDetokenizer(flow, hift, chunk, first_hop=20, graph_rows=(1, 2, 4))
    assert graphed.cover_prompt(6)
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    pushes = [23, 25, 25, 10]
    want, got = stream(eager, 3, pushes, prompt_chunks=6), stream(graphed, 3, pushes, 6)
    assert not [key for key in graphed.eager_calls if key[0] == "flow"]
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_served_flow_runs_its_gemms_in_its_convs_tf32(parts):
    """Served (cuDNN's float32 convs in TF32, torch's default), the flow + HiFT graphs run the
    estimator's linear layers in TF32 too (models/device_util.py, gemms_in_conv_precision),
    most of a job's arithmetic: the audio stays within TF32's rounding of IEEE float32's."""
    flow, hift, chunk = parts
    pushes = [23, 25, 25, 10]
    exact = stream(FlowHiftDetokenizer(flow, hift, chunk, first_hop=20), 3, pushes)
    torch.backends.cudnn.conv.fp32_precision = "tf32"  # restored after the test (conftest)
    graphed = FlowHiftDetokenizer(flow, hift, chunk, first_hop=20, graph_rows=(1, 2, 4))
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    for a, b in zip(exact, stream(graphed, 3, pushes), strict=True):
        assert a.pow(2).mean().sqrt() > 1e-4  # a signal to compare
        error = (b - a).pow(2).mean().sqrt() / a.pow(2).mean().sqrt()
        assert error < 0.01, f"relative RMS error {error:.4f}"
