"""The streaming detokenizer with its estimator over cached context (`estimator_cache=True`,
models/codecs/flow_hift/cached_flow.py): unbounded, its mel is CosyVoice's own streaming mel
(the windowed detokenizer with the whole history); bounded, it is that mel until a chunk is
dropped, chunked equals whole, and a batch equals its requests alone."""

from __future__ import annotations

import pytest
import torch

from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from tests.models.test_flow_hift import (
    assert_batch_equals_singles,
    codes,
    stream_for,
)
from tests.models.test_flow_hift import (
    detok as detok,  # noqa: F401 - the module's fixture: tiny flow + HiFT, seeded
)


def cached(detok, **kw) -> FlowHiftDetokenizer:
    return FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, estimator_cache=True, **kw)


def flow_state(d: FlowHiftDetokenizer, seed: int, prompt_chunks: int, tokens, pushes):
    """A stream after its flow steps (the pushes, then the rest final)."""
    state = stream_for(d, seed, prompt_chunks)
    i = 0
    for size in pushes:
        d.push(state, tokens[i : i + size])
        i += size
        d._flow_step([state], [False])
    d.push(state, tokens[i:])
    d._flow_step([state], [True])
    return state


def flow_mel(d: FlowHiftDetokenizer, seed: int, prompt_chunks: int, tokens, pushes):
    return flow_state(d, seed, prompt_chunks, tokens, pushes).mel


@pytest.mark.parametrize("first_hop", [None, 7])
@pytest.mark.parametrize("prompt_chunks", [0, 1])
def test_unbounded_cache_equals_cosyvoices_own_streaming(detok, first_hop, prompt_chunks):  # noqa: F811
    tokens = codes(5, 110)
    pushes = [10, 20, 25, 13, 30]
    reference = FlowHiftDetokenizer(
        detok.flow, detok.hift, detok.chunk, context_chunks=None, first_hop=first_hop
    )
    expected = flow_mel(reference, 6, prompt_chunks, tokens, pushes)
    got = flow_mel(
        cached(detok, context_chunks=None, first_hop=first_hop), 6, prompt_chunks, tokens, pushes
    )
    assert got.shape == expected.shape == (80, 2 * 110)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_bounded_cache_chunked_equals_whole_and_batches_equal_singles(detok):  # noqa: F811
    d = cached(detok)  # the default bounded context: prompt + 2 chunks
    tokens = codes(7, 120)
    chunked = flow_mel(d, 8, 1, tokens, [10, 20, 25, 13, 30])
    whole = flow_mel(d, 8, 1, tokens, [])
    torch.testing.assert_close(chunked, whole, atol=1e-4, rtol=1e-4)
    # Rows of different shapes (prompt or none, first chunks beside steady ones) in one call.
    assert_batch_equals_singles(
        d, [(1, 1, 90, [30, 40]), (2, 0, 70, [10, 40]), (3, 1, 120, [60, 30])]
    )


def test_the_bounded_cache_equals_the_whole_history_until_it_drops_a_chunk(detok):  # noqa: F811
    """The prompt and 2 chunks of context are kept: the first 3 chunks have all their history,
    the 4th on lack the chunks dropped before them."""
    tokens = codes(9, 150)
    pushes = [25] * 5
    reference = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, context_chunks=None)
    full = flow_mel(reference, 10, 1, tokens, pushes)
    bounded = flow_mel(cached(detok), 10, 1, tokens, pushes)
    kept = slice(0, 2 * 25 * 3)
    torch.testing.assert_close(bounded[:, kept], full[:, kept], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(bounded[:, 2 * 25 * 3 :], full[:, 2 * 25 * 3 :], atol=1e-3)
