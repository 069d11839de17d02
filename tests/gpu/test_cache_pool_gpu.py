"""The pooled cached flow estimator (cache_pool.py) in CUDA graphs: a graphed stream's audio
equals the same detokenizer's eager one and the eager PassCache path's, with more streams than
slots, a short first hop and a part-chunk at the end; every call of a job found its graph.
(ComparedGraphs cannot check the pool's solve call by call: the call writes the chunk into
the pool, so running it twice reads a different context the second time.)

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from tests.gpu.test_flow_hift_graphs import stream

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.mark.parametrize("first_hop", [7, 20])
def test_graphed_pooled_stream_equals_eager(parts, first_hop):
    flow, hift, chunk = parts

    def detok(**kw) -> FlowHiftDetokenizer:
        return FlowHiftDetokenizer(
            flow, hift, chunk, first_hop=first_hop, estimator_cache=True, **kw
        )

    plain, eager, graphed = detok(), detok(cache_slots=3), detok(cache_slots=3)
    graphed.enable_cuda_graphs(CallableGraphs(CUDA))
    pushes = [first_hop + 3, 25, 25, 30, 10]
    expected = stream(plain, 5, pushes)
    for other in (stream(eager, 5, pushes), stream(graphed, 5, pushes)):
        for a, b in zip(expected, other, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
    assert not graphed.eager_calls
    assert graphed.cache_pool.free_slots == 3  # every stream ended: its slot is back
