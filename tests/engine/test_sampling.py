"""The sampler's top-k / top-p masks: the top-k threshold used when no row has a nucleus keeps
what the sorted path keeps."""

from __future__ import annotations

import torch

from engine.sampling import top_k_top_p


def test_top_k_without_a_nucleus_equals_the_sorted_path():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=g)  # continuous: no ties
    top_k = torch.tensor([0, 1, 7, 299, 400])  # all, one, some, all but one, more than V
    top_p = torch.ones(5)
    sorted_path = top_k_top_p(logits, top_k, top_p)
    fast = top_k_top_p(logits, top_k, top_p, nucleus=False, max_k=400)
    assert torch.equal(fast, sorted_path)
    assert [int(r.isfinite().sum()) for r in fast] == [300, 1, 7, 299, 300]


def test_top_k_threshold_keeps_ties_and_masked_rows():
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0, float("-inf")]])
    out = top_k_top_p(logits, torch.tensor([2]), torch.ones(1), nucleus=False, max_k=2)
    assert out[0].isfinite().tolist() == [True, True, True, False, False]  # the tie at k stays
