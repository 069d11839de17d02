"""Step-Audio 2's token2wav (the DiT flow estimator, the voice prompt as one attention chunk)
in CUDA graphs: a graphed stream's audio equals the eager one's, at the tiny sizes and at the
published shapes with random weights (`step-audio2-mini --random-weights`'s codec).

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import parse_yaml_text
from models.step_audio2 import token2wav_config as T2W
from tests.gpu.test_flow_hift_graphs import stream

# Graphs against eager in IEEE float32 (ieee_float32): captured at padded shapes they may pick
# other kernels, whose TF32 rounding would differ (served, the flow runs in TF32).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ieee_float32")]
CUDA = torch.device("cuda")


def parts(sizes: dict, hift_widths: tuple[int, int]):
    cfg = T2W.parse_flow_yaml(parse_yaml_text(T2W.flow_yaml(sizes), T2W.FLOW_FILE))
    torch.manual_seed(5)
    flow, hift = CausalFlow(cfg).eval(), HiFTGenerator(T2W.hift_config(*hift_widths)).eval()
    with torch.no_grad():  # adaLN's zero init would leave most of the DiT unexercised
        for p in flow.decoder.estimator.parameters():
            p.normal_(0.0, 0.05)
    hift.fold_weight_norm()
    return flow.to(CUDA), hift.to(CUDA)


@pytest.mark.parametrize(
    "sizes,widths", [(T2W.TINY_SIZES, T2W.TINY_HIFT), (T2W.REAL_SIZES, (512, 512))]
)
def test_graphed_dit_stream_equals_eager_stream(sizes, widths):
    flow, hift = parts(sizes, widths)
    eager = FlowHiftDetokenizer(flow, hift, T2W.CHUNK_TOKENS, first_hop=20)
    graphed = FlowHiftDetokenizer(flow, hift, T2W.CHUNK_TOKENS, first_hop=20, graph_rows=(1, 2, 4))
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    pushes = [23, 25, 25, 30, 10]
    want, got = stream(eager, 3, pushes), stream(graphed, 3, pushes)
    assert not [key for key in graphed.eager_calls if key[0] == "flow"]
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=1e-3, rtol=1e-3)
